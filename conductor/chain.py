"""The chain file: parse, validate and resolve `chain.toml` before anything runs.

Every problem is reported as a `ChainError` naming the file, the key and,
where it can be found, the line; nothing is spawned for a bad file.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .plugin import PluginError, instantiate, load_factory

__all__ = ["Chain", "ChainError", "ComponentSpec", "load_chain"]

TOP_KEYS = {"name", "proxy", "agent"}
COMPONENT_KEYS = {"name", "command", "plugin", "options", "env", "cwd", "dialect", "url", "headers"}
DIALECTS = ("auto", "underscore", "plain", "legacy")
ACP_PATH = "/acp"
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
RESERVED_HEADERS = {"host", "upgrade", "connection", "content-length", "transfer-encoding"}
PYTHON_NAMES = {"python", "python3"}


class ChainError(Exception):
    """A chain file problem, already phrased for the user."""

    def __init__(self, path: Path, message: str, key: str | None = None, line: int | None = None):
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if key is not None:
            where += f", key '{key}'"
        super().__init__(f"{where}: {message}")


@attrs.frozen
class ComponentSpec:
    """One resolved component: a proxy or the agent, a command or an in-process plugin."""

    name: str
    role: str  # "proxy" or "agent"
    command: tuple[str, ...] = ()
    env: dict[str, str] = attrs.field(factory=dict)
    cwd: Path | None = None
    dialect: str = "auto"
    plugin: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict)
    factory: Callable[..., Any] | None = attrs.field(default=None, eq=False, repr=False)
    url: str | None = None  # a remote component, reached over WebSocket
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)  # may hold secrets

    def make_plugin(self) -> Any:
        """A fresh plugin instance (raises PluginError if the factory rejects the options)."""
        assert self.plugin is not None and self.factory is not None
        return instantiate(self.plugin, self.factory, self.options)

    def describe(self) -> str:
        """One line for `conductor check`: never a header value (they carry secrets)."""
        if self.url is not None:
            from .wsio import public_url

            parts = [f"{self.role} {self.name!r}: {public_url(self.url)} (remote, WebSocket)"]
            if self.headers:
                parts.append("headers=" + ",".join(sorted(self.headers)))
            if self.role == "proxy":
                parts.append(f"dialect={self.dialect}")
            return "  ".join(parts)
        if self.plugin is not None:
            return f"{self.role} {self.name!r}: plugin {self.plugin} (in-process)  options={self.options}"
        parts = [f"{self.role} {self.name!r}: {' '.join(self.command)}"]
        if self.cwd is not None:
            parts.append(f"cwd={self.cwd}")
        if self.env:
            parts.append("env=" + ",".join(sorted(self.env)))
        if self.role == "proxy":
            parts.append(f"dialect={self.dialect}")
        return "  ".join(parts)


@attrs.frozen
class Chain:
    """A validated chain: proxies nearest the editor first, then the agent (or none)."""

    path: Path
    name: str
    proxies: tuple[ComponentSpec, ...]
    agent: ComponentSpec | None

    @property
    def proxy_mode(self) -> bool:
        """Without an agent the conductor itself runs as a proxy in another chain."""
        return self.agent is None

    @property
    def components(self) -> tuple[ComponentSpec, ...]:
        return self.proxies + ((self.agent,) if self.agent is not None else ())

    def describe(self) -> str:
        lines = [f"chain {self.name!r} ({self.path})"]
        lines += [f"  {i}. {c.describe()}" for i, c in enumerate(self.components, 1)]
        if self.proxy_mode:
            lines.append("  (no agent: runs as a proxy, forwarding past its last proxy)")
        return "\n".join(lines)


def load_chain(path: str | os.PathLike[str], *, try_plugins: bool = False) -> Chain:
    """Read and validate a chain file; raise ChainError on any problem.

    Plugins are always imported; with `try_plugins` each factory is also
    called once with its options, so a refusal is reported too.
    """
    path = Path(path).absolute()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ChainError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ChainError(path, f"cannot read the file ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ChainError(path, f"invalid TOML: {exc}") from None
    chain = _Resolver(path, text).chain(data)
    if try_plugins:
        for component in chain.components:
            if component.plugin is not None:
                try:
                    component.make_plugin()
                except PluginError as exc:
                    raise ChainError(
                        path, f"[[proxy]] {component.name!r}: {exc}", "options"
                    ) from None
    return chain


@attrs.define
class _Resolver:
    path: Path
    text: str

    @property
    def folder(self) -> Path:
        return self.path.parent

    def fail(
        self, message: str, key: str | None = None, section: tuple[str, int] | None = None
    ) -> ChainError:
        return ChainError(self.path, message, key, self.line_of(key, section))

    def line_of(self, key: str | None, section: tuple[str, int] | None) -> int | None:
        """Best-effort line number of `key` inside a section, or of the section itself."""
        lines = self.text.splitlines()
        start, end = 0, len(lines)
        if section is not None:
            table, index = section
            header = re.compile(
                r"^\s*\[\[\s*proxy\s*\]\]" if table == "proxy" else r"^\s*\[\s*agent\s*\]"
            )
            hits = [i for i, line in enumerate(lines) if header.match(line)]
            if index < len(hits):
                start = hits[index]
                following = [
                    i for i, ln in enumerate(lines) if i > start and re.match(r"^\s*\[", ln)
                ]
                end = following[0] if following else len(lines)
                if key is None:
                    return start + 1
        if key is None:
            return None
        pattern = re.compile(rf"^\s*\"?{re.escape(key)}\"?\s*=")
        for i in range(start, end):
            if pattern.match(lines[i]):
                return i + 1
        return start + 1 if section is not None and start < len(lines) else None

    def chain(self, data: dict[str, Any]) -> Chain:
        for key in data:
            if key not in TOP_KEYS:
                raise self.fail(f"unknown key; expected one of {sorted(TOP_KEYS)}", key)
        name = data.get("name", self.path.stem)
        if not isinstance(name, str):
            raise self.fail("must be a string", "name")
        raw_proxies = data.get("proxy", [])
        if not isinstance(raw_proxies, list) or not all(isinstance(p, dict) for p in raw_proxies):
            raise self.fail("must be an array of tables, written [[proxy]]", "proxy")
        proxies = [self.component(p, "proxy", i) for i, p in enumerate(raw_proxies)]
        agent = None
        if "agent" in data:
            if not isinstance(data["agent"], dict):
                raise self.fail("must be a table, written [agent]", "agent")
            agent = self.component(data["agent"], "agent", 0)
        if agent is None and not proxies:
            raise self.fail(
                "the chain has no [agent] and no [[proxy]]: add an [agent] with a command "
                "(a chain without [agent] runs as a proxy and needs at least one proxy)"
            )
        components = _unique_names(proxies + ([agent] if agent else []))
        return Chain(
            path=self.path,
            name=name,
            proxies=tuple(components[: len(proxies)]),
            agent=components[-1] if agent else None,
        )

    def component(self, table: dict[str, Any], role: str, index: int) -> ComponentSpec:
        section = (role, index)
        label = f"[[proxy]] #{index + 1}" if role == "proxy" else "[agent]"
        for key in table:
            if key not in COMPONENT_KEYS:
                raise self.fail(
                    f"unknown key in {label}; expected one of {sorted(COMPONENT_KEYS)}",
                    key,
                    section,
                )
        kinds = [k for k in ("plugin", "command", "url") if k in table]
        if len(kinds) > 1:
            raise self.fail(
                f"{label} has both {' and '.join(repr(k) for k in kinds)}; give one",
                "plugin" if "plugin" in kinds else "url",
                section,
            )
        if "plugin" in table:
            return self.plugin(table, role, label, section)
        if "url" in table:
            return self.remote(table, role, label, section)
        if "headers" in table:
            raise self.fail(
                f"{label}: 'headers' applies to a remote component (url)", "headers", section
            )
        if "options" in table:
            raise self.fail(
                f"{label}: 'options' is for plugins; a command takes arguments", "options", section
            )
        if "command" not in table:
            raise self.fail(f"{label} needs a 'command' (an argument list)", "command", section)
        env = table.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise self.fail(f"{label}: 'env' must be a table of strings", "env", section)
        cwd = None
        if "cwd" in table:
            if not isinstance(table["cwd"], str):
                raise self.fail(f"{label}: 'cwd' must be a string", "cwd", section)
            cwd = Path(os.path.normpath(self.folder / table["cwd"]))
            if not cwd.is_dir():
                raise self.fail(f"{label}: 'cwd' {str(cwd)!r} is not a folder", "cwd", section)
        dialect = self.dialect(table, role, label, section)
        command = self.command(table["command"], env, label, section)
        name = table.get("name") or _default_name(table["command"], role)
        if not isinstance(name, str) or name == "editor":
            raise self.fail(
                f"{label}: 'name' must be a string other than 'editor'", "name", section
            )
        return ComponentSpec(
            name=name, role=role, command=command, env=env, cwd=cwd, dialect=dialect
        )

    def plugin(
        self, table: dict[str, Any], role: str, label: str, section: tuple[str, int]
    ) -> ComponentSpec:
        if role == "agent":
            raise self.fail("[agent] cannot be a plugin; plugins are proxies", "plugin", section)
        for key in ("env", "cwd", "dialect", "headers"):
            if key in table:
                raise self.fail(f"{label}: '{key}' applies to commands, not plugins", key, section)
        spec = table["plugin"]
        if not isinstance(spec, str) or not spec:
            raise self.fail(
                f"{label}: 'plugin' must be 'module:factory' or a plugin name", "plugin", section
            )
        options = table.get("options", {})
        if not isinstance(options, dict):
            raise self.fail(f"{label}: 'options' must be a table", "options", section)
        try:
            factory = load_factory(spec, self.folder)
        except PluginError as exc:
            raise self.fail(str(exc), "plugin", section) from None
        name = table.get("name") or spec.rpartition(":")[0].rpartition(".")[2] or spec
        if not isinstance(name, str) or name == "editor":
            raise self.fail(
                f"{label}: 'name' must be a string other than 'editor'", "name", section
            )
        return ComponentSpec(name=name, role=role, plugin=spec, options=options, factory=factory)

    def remote(
        self, table: dict[str, Any], role: str, label: str, section: tuple[str, int]
    ) -> ComponentSpec:
        """A component served elsewhere: `url = "ws://host:port/acp"` plus optional headers."""
        for key in ("env", "cwd", "options"):
            if key in table:
                raise self.fail(
                    f"{label}: '{key}' applies to a command or plugin, not a url", key, section
                )
        raw = table["url"]
        if not isinstance(raw, str):
            raise self.fail(
                f"{label}: 'url' must be a string like \"ws://host:9000/acp\"", "url", section
            )
        url = self.url(self.expand(raw, "url", label, section), label, section)
        headers_table = table.get("headers", {})
        if not isinstance(headers_table, dict) or not all(
            isinstance(v, str) for v in headers_table.values()
        ):
            raise self.fail(
                f"{label}: 'headers' must be a table of strings, "
                'e.g. { Authorization = "Bearer ${TOKEN}" }',
                "headers",
                section,
            )
        headers = {}
        for name, value in headers_table.items():
            if not HEADER_NAME.fullmatch(name):
                raise self.fail(f"{label}: {name!r} is not an HTTP header name", "headers", section)
            if name.lower() in RESERVED_HEADERS or name.lower().startswith("sec-websocket-"):
                raise self.fail(
                    f"{label}: header {name!r} is set by the WebSocket handshake itself",
                    "headers",
                    section,
                )
            expanded = self.expand(value, "headers", label, section)
            if any(c in expanded for c in "\r\n\0"):
                raise self.fail(
                    f"{label}: header {name!r} has a line break in its value", "headers", section
                )
            headers[name] = expanded
        dialect = self.dialect(table, role, label, section)
        name = table.get("name") or "remote"
        if not isinstance(name, str) or name == "editor":
            raise self.fail(
                f"{label}: 'name' must be a string other than 'editor'", "name", section
            )
        return ComponentSpec(name=name, role=role, dialect=dialect, url=url, headers=headers)

    def expand(self, value: str, key: str, label: str, section: tuple[str, int]) -> str:
        """`${VAR}` from the environment, so secrets stay out of the chain file."""

        def one(match: re.Match[str]) -> str:
            variable = match.group(1)
            if variable not in os.environ:
                raise self.fail(
                    f"{label}: environment variable {variable} is not set (used as ${{{variable}}})",
                    key,
                    section,
                )
            return os.environ[variable]

        return ENV_REFERENCE.sub(one, value)

    def url(self, url: str, label: str, section: tuple[str, int]) -> str:
        example = 'e.g. "ws://127.0.0.1:9000/acp" or "wss://host/acp"'
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise self.fail(f"{label}: bad url ({exc}); {example}", "url", section) from None
        if parts.scheme not in ("ws", "wss"):
            raise self.fail(
                f"{label}: 'url' must start with ws:// or wss:// (got {parts.scheme or 'no'} scheme); {example}",
                "url",
                section,
            )
        if not parts.hostname:
            raise self.fail(f"{label}: 'url' has no host; {example}", "url", section)
        if parts.fragment:
            raise self.fail(f"{label}: 'url' cannot have a #fragment", "url", section)
        del port  # parsed only to validate it
        # The ACP transport serves at /acp; a bare host:port means that endpoint.
        path = parts.path or ACP_PATH
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))

    def dialect(
        self, table: dict[str, Any], role: str, label: str, section: tuple[str, int]
    ) -> str:
        """The proxy dialect a component asks for ("auto" unless given)."""
        dialect = table.get("dialect", "auto")
        if dialect not in DIALECTS:
            raise self.fail(
                f"{label}: 'dialect' must be one of {list(DIALECTS)}", "dialect", section
            )
        if role == "agent" and "dialect" in table:
            raise self.fail("[agent]: 'dialect' applies to proxies only", "dialect", section)
        return str(dialect)

    def command(
        self, value: Any, env: dict[str, str], label: str, section: tuple[str, int]
    ) -> tuple[str, ...]:
        if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
            raise self.fail(
                f"{label}: 'command' must be a non-empty list of strings, "
                'e.g. ["python3", "-m", "conductor.demo_agent"] (it is never run through a shell)',
                "command",
                section,
            )
        program, args = value[0], value[1:]
        if program in PYTHON_NAMES:
            program = sys.executable
        elif "/" in program:
            resolved = Path(
                os.path.normpath(self.folder / program)
            )  # keep symlinks: a venv's python
            if not (resolved.is_file() and os.access(resolved, os.X_OK)):
                raise self.fail(
                    f"{label}: executable not found: {str(resolved)!r}", "command", section
                )
            program = str(resolved)
        else:
            search = env.get("PATH", os.environ.get("PATH", os.defpath))
            found = shutil.which(program, path=search)
            if found is None:
                raise self.fail(
                    f"{label}: executable {program!r} not found on PATH", "command", section
                )
            program = found
        return (program, *(self._arg(a) for a in args))

    def _arg(self, arg: str) -> str:
        """Arguments naming an existing file relative to the chain file become absolute."""
        if arg.startswith("-") or os.path.isabs(arg) or "/" not in arg:
            return arg
        candidate = self.folder / arg
        return os.path.normpath(candidate) if candidate.exists() else arg


def _default_name(command: list[str], role: str) -> str:
    """A short name from the command: the module or script it runs."""
    args = [a for a in command if not a.startswith("-")]
    if args and Path(args[0]).name in PYTHON_NAMES | {Path(sys.executable).name}:
        args = args[1:]
    if not args:
        return role
    tail = args[0].rstrip("/").split("/")[-1]
    if tail.endswith(".py"):
        tail = tail[:-3]
    return tail.split(".")[-1] or role


def _unique_names(components: list[ComponentSpec]) -> list[ComponentSpec]:
    seen: dict[str, int] = {}
    out = []
    for component in components:
        count = seen.get(component.name, 0) + 1
        seen[component.name] = count
        out.append(
            component if count == 1 else attrs.evolve(component, name=f"{component.name}-{count}")
        )
    return out
