"""Shared helpers: run the real `conductor` as a subprocess and talk to it over pipes."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PASSTHROUGH = FIXTURES / "passthrough_proxy.py"
SCRIPT_AGENT = FIXTURES / "script_agent.py"
PY = sys.executable
TIMEOUT = 15.0


class JsonRpcTalk:
    """What every test peer does on top of `send` and `read`: requests, waiting for answers."""

    def send(self, message: Any) -> None:
        raise NotImplementedError

    def read(self, timeout: float = TIMEOUT) -> Any:
        raise NotImplementedError

    def request(self, id: Any, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def read_until(self, predicate: Any, timeout: float = TIMEOUT) -> tuple[list[Any], Any]:
        """Read messages until one satisfies `predicate`; return (the others, that one)."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.read(max(0.01, deadline - time.monotonic()))
            if predicate(message):
                return seen, message
            seen.append(message)

    def response(self, id: Any, timeout: float = TIMEOUT) -> tuple[list[Any], Any]:
        return self.read_until(
            lambda m: isinstance(m, dict) and m.get("id") == id and "method" not in m, timeout
        )

    def prompt(self, id: Any, session: str, text: str) -> tuple[list[Any], Any]:
        """Send a text `session/prompt`; return (what came before its answer, the answer)."""
        self.request(id, "session/prompt", prompt_params(session, text))
        return self.response(id)


class Peer(JsonRpcTalk):
    """A subprocess spoken to with newline-delimited JSON; stdout lines are queued by a thread."""

    def __init__(self, argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr_lines: list[str] = []
        self.stderr_closed = threading.Event()  # set once the process's stderr reached EOF
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode(errors="replace").rstrip("\n"))
        self.stderr_closed.set()

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data if data.endswith(b"\n") else data + b"\n")
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode())

    def read_raw(self, timeout: float = TIMEOUT) -> bytes:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message within {timeout}s; stderr:\n{self.stderr}") from None
        if line is None:
            self.lines.put(None)
            raise AssertionError(f"stdout closed; stderr:\n{self.stderr}")
        return line.rstrip(b"\n")

    def read(self, timeout: float = TIMEOUT) -> Any:
        return json.loads(self.read_raw(timeout))

    def assert_silent(self, seconds: float = 0.3) -> None:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected output: {line!r}")

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def make_chain(tmp_path: Path) -> Any:
    """Write a chain file from TOML text and return its path."""
    counter = iter(range(1000))

    def make(text: str, name: str | None = None) -> Path:
        path = tmp_path / (name or f"chain{next(counter)}.toml")
        path.write_text(textwrap.dedent(text))
        return path

    return make


@pytest.fixture
def conductor(tmp_path: Path) -> Iterator[Any]:
    """Start `conductor run CHAIN` subprocesses; all are killed at teardown."""
    peers: list[Peer] = []

    def start(chain: Path, *args: str, env: dict[str, str] | None = None) -> Peer:
        peer = Peer([PY, "-m", "conductor", *args, "run", str(chain)], cwd=ROOT, env=env)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.kill()


def toml_list(argv: list[str | Path]) -> str:
    return json.dumps([str(a) for a in argv])


def proxy_block(*args: str, name: str | None = None, dialect: str | None = None) -> str:
    lines = ["[[proxy]]", f"command = {toml_list([PY, PASSTHROUGH, *args])}"]
    if name:
        lines.append(f'name = "{name}"')
    if dialect:
        lines.append(f'dialect = "{dialect}"')
    return "\n".join(lines) + "\n"


def demo_agent_block(*args: str, name: str = "demo") -> str:
    return f'[agent]\nname = "{name}"\ncommand = {toml_list([PY, "-m", "conductor.demo_agent", *args])}\n'


def script_agent_block(*args: str, name: str = "scripted") -> str:
    return f'[agent]\nname = "{name}"\ncommand = {toml_list([PY, SCRIPT_AGENT, *args])}\n'


def init_params(version: int = 1) -> dict[str, Any]:
    if version == 1:
        return {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
            "clientInfo": {"name": "tests", "version": "0"},
        }
    return {
        "protocolVersion": version,
        "info": {"name": "tests", "version": "0"},
        "capabilities": {},
    }


def prompt_params(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


def start_session(peer: Peer, version: int = 1, cwd: str = "/tmp") -> str:
    """initialize + session/new; return the session id."""
    peer.request(0, "initialize", init_params(version))
    _, response = peer.response(0)
    assert "result" in response, response
    peer.request(1, "session/new", {"cwd": cwd, "mcpServers": []})
    _, response = peer.response(1)
    assert "result" in response, response
    return str(response["result"]["sessionId"])


def agent_text(messages: list[Any]) -> str:
    """The concatenated agent message text in a list of session/update notifications."""
    out = []
    for m in messages:
        if m.get("method") != "session/update":
            continue
        update = m["params"]["update"]
        if (
            update.get("sessionUpdate") == "agent_message_chunk"
            and update["content"].get("type") == "text"
        ):
            out.append(update["content"]["text"])
    return "".join(out)


def texts(events: list[dict[str, Any]]) -> list[str]:
    """The agent message chunks of an SDK client's transcript (its JSON Lines events)."""
    return [
        e["params"]["update"]["content"]["text"]
        for e in events
        if e["event"] == "update"
        and e["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]


def read_jsonl(path: Path) -> list[Any]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def toml_value(value: object) -> str:
    """A TOML inline value (JSON is TOML only for scalars and lists of scalars, not tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
        )
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def plugin_block(spec: str, mode: str, name: str, /, **options: object) -> str:
    """A [[proxy]] running plugin `spec` in-process, or as `conductor proxy` in a subprocess."""
    if mode == "inprocess":
        return f'[[proxy]]\nname = "{name}"\nplugin = "{spec}"\noptions = {toml_value(options)}\n'
    argv = [PY, "-m", "conductor", "proxy", spec, "--name", name]
    for key, value in options.items():
        argv += ["-o", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return f'[[proxy]]\nname = "{name}"\ncommand = {json.dumps(argv)}\n'


def allow_permission(peer: Peer, option: str = "allow") -> tuple[list[Any], Any]:
    """Read until the editor is asked for permission, and answer with `option`.

    Returns what came before the request, and the request."""
    before, request = peer.read_until(lambda m: m.get("method") == "session/request_permission")
    outcome = {"outcome": "selected", "optionId": option}
    peer.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})
    return before, request


WATCHER = "tests.fixtures.plugins:Watcher"  # an in-process plugin that sees every message


def chain_around(
    folder: Path,
    agent: list[str],
    proxies: int | list[str] = 0,
    name: str = "chain.toml",
    agent_name: str = "agent",
) -> Path:
    """A chain file: `agent` behind `proxies` pass-through subprocess proxies, or behind the
    given layout of subprocess ("sub") and in-process ("plugin") pass-through proxies."""
    layout = ["sub"] * proxies if isinstance(proxies, int) else proxies
    blocks = [
        proxy_block(name=f"pass{i + 1}")
        if kind == "sub"
        else plugin_block(WATCHER, "inprocess", f"watch{i + 1}")
        for i, kind in enumerate(layout)
    ]
    blocks.append(f'[agent]\nname = "{agent_name}"\ncommand = {toml_list(list(agent))}\n')
    path = folder / name
    path.write_text("\n".join(blocks))
    return path


def conductor_command(chain: Path) -> list[str]:
    """`conductor run CHAIN` as an argument list."""
    return [PY, "-m", "conductor", "run", str(chain)]


# An SDK client's transcript for an echo agent: a plain prompt, then one that asks permission.
ECHO_WITH_PERMISSION_EVENTS = [
    "initialize",
    "session_new",
    *["update"] * 2,
    "prompt_response",
    "permission",
    *["update"] * 3,
    "prompt_response",
]


# ------------------------------------------------------------------ MCP over ACP

MCP_PY_CLIENT = ROOT / "tests" / "peers" / "mcp_py_client.py"
TOOLBOX = plugin_block("tests.fixtures.plugins:Toolbox", "inprocess", "tools")


def polyfill_block(**options: Any) -> str:
    """The MCP-over-ACP polyfill, in-process."""
    return plugin_block("mcp_over_acp", "inprocess", "polyfill", **options)


@pytest.fixture
def polyfilled(make_chain, conductor, tmp_path):
    """Start Toolbox -> polyfill -> script agent; return (peer, agent record, init result, session)."""

    def start(*agent_flags: str, version: int = 1, **options: Any):
        record = tmp_path / "agent.jsonl"
        chain = make_chain(
            TOOLBOX
            + polyfill_block(**options)
            + script_agent_block("--record", str(record), *agent_flags, name="agent")
        )
        peer = conductor(chain)
        peer.request(0, "initialize", init_params(version))
        _, init = peer.response(0)
        peer.request(1, "session/new", {"cwd": "/tmp", "mcpServers": []})
        _, new = peer.response(1)
        assert "result" in new, new
        return peer, record, init["result"], new["result"]["sessionId"]

    return start


def declarations(record: Path) -> list[dict[str, Any]]:
    """The mcpServers of the last session/new an agent recorded."""
    news = [m for m in read_jsonl(record) if m.get("method") == "session/new"]
    return news[-1]["params"]["mcpServers"]


def run_mcp_client(mode: str, declaration: dict[str, Any], steps: list[Any]) -> list[Any]:
    """The official Python MCP client against a declaration, one output line per step."""
    done = subprocess.run(
        [sys.executable, str(MCP_PY_CLIENT), mode, json.dumps(declaration), json.dumps(steps)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


# ------------------------------------------------------------------ WebSocket (conductor serve)

TOKEN = "test-token-1234"
TLS_CERT = FIXTURES / "tls-cert.pem"  # self-signed for 127.0.0.1, test use only
TLS_KEY = FIXTURES / "tls-key.pem"


def descendants(pid: int) -> set[int]:
    """Every live (non-zombie) process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate: Any, timeout: float = TIMEOUT, what: str = "condition") -> None:
    """Poll `predicate` until it holds (not a timing assertion: the timeout only bounds a hang)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        time.sleep(0.02)


class Served:
    """`conductor serve CHAIN --listen 127.0.0.1:0` as a subprocess; `url` is parsed from stderr."""

    def __init__(self, chain: Path, *args: str, token: str | None = TOKEN, env: Any = None):
        environment = {**os.environ, **(env or {})}
        environment.pop("ACP_CONDUCTOR_TOKEN", None)
        if token is not None:
            environment["ACP_CONDUCTOR_TOKEN"] = token
        self.proc = subprocess.Popen(
            [PY, "-m", "conductor", "serve", str(chain), "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=environment,
        )
        self.stderr_lines: list[str] = []
        self.stdout = b""
        self._listening: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        try:
            url = self._listening.get(timeout=TIMEOUT)
        except queue.Empty:
            url = None
        if url is None:
            raise AssertionError(f"conductor serve did not start; stderr:\n{self.stderr}")
        self.url = url
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stderr_lines.append(line)
            if line.startswith("listening on "):
                self._listening.put(line.split()[2])
        self._listening.put(None)

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def connect(self, token: str | None = TOKEN, **kwargs: Any) -> WsPeer:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return WsPeer(self.url, headers=headers, **kwargs)

    def wait_for_log(self, fragment: str) -> None:
        wait_until(lambda: fragment in self.stderr, what=f"log line {fragment!r}")

    def terminate(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=TIMEOUT + 10)

    def kill(self) -> None:
        tree = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start `conductor serve` subprocesses; all (and whatever they started) go at teardown."""
    started: list[Served] = []

    def start(chain: Path, *args: str, **kwargs: Any) -> Served:
        served = Served(chain, *args, **kwargs)
        started.append(served)
        return served

    yield start
    for served in started:
        served.kill()


class WsPeer(JsonRpcTalk):
    """An editor over WebSocket, played by the `websockets` package (written by nobody here)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, **kwargs: Any) -> None:
        from websockets.sync.client import connect

        kwargs.setdefault("max_size", None)
        kwargs.setdefault("proxy", None)
        kwargs.setdefault("legacy", True)  # a plain connection object, closed by the test
        self.ws = connect(url, additional_headers=headers or {}, open_timeout=TIMEOUT, **kwargs)

    @property
    def connection_id(self) -> str | None:
        response = self.ws.response
        assert response is not None
        return response.headers.get("Acp-Connection-Id")

    def send(self, message: Any) -> None:
        self.ws.send(json.dumps(message))

    def read(self, timeout: float = TIMEOUT) -> Any:
        try:
            frame = self.ws.recv(timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"no message within {timeout}s") from None
        assert isinstance(frame, str), "JSON-RPC travels in text frames"
        return json.loads(frame)

    def start_session(self) -> str:
        self.request(0, "initialize", init_params())
        _, response = self.response(0)
        assert "result" in response, response
        self.request(1, "session/new", {"cwd": "/tmp", "mcpServers": []})
        _, response = self.response(1)
        assert "result" in response, response
        return str(response["result"]["sessionId"])

    def closed_with(self, timeout: float = TIMEOUT) -> tuple[int, str]:
        """Wait for the server's close frame; return its code and reason."""
        from websockets.exceptions import ConnectionClosed

        deadline = time.monotonic() + timeout
        try:
            while True:
                self.ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        except ConnectionClosed as exc:
            assert exc.rcvd is not None, f"no close frame from the server: {exc}"
            return exc.rcvd.code, exc.rcvd.reason
        except TimeoutError:
            raise AssertionError(f"the server did not close within {timeout}s") from None

    def close(self) -> None:
        self.ws.close()


def refusal(url: str, **kwargs: Any) -> tuple[int, str]:
    """Try to open a WebSocket that the server must refuse; return the HTTP status and body."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    kwargs.setdefault("proxy", None)
    kwargs.setdefault("legacy", True)
    try:
        connect(url, open_timeout=TIMEOUT, **kwargs).close()
    except InvalidStatus as exc:
        return exc.response.status_code, exc.response.body.decode()
    raise AssertionError(f"{url} accepted the connection")
