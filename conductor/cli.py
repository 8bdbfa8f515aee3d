"""The `conductor` command line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from . import __version__
from .chain import Chain, ChainError, load_chain
from .plugin import PluginError, load_factory

LOG_LEVELS = ["debug", "info", "warning", "error"]

EPILOG = """\b
Quick start:
  conductor prompt chains/demo.toml "hello"
Editor entry (Zed agent_servers):
  {"command": "conductor", "args": ["run", "/abs/path/chain.toml"]}
"""


SERVE_EPILOG = """\b
Two machines:
  build-box$  ACP_CONDUCTOR_TOKEN=secret conductor serve agent.toml --listen 0.0.0.0:8765
  laptop:     [agent]
              url = "ws://build-box:8765/acp"
              headers = { Authorization = "Bearer ${ACP_CONDUCTOR_TOKEN}" }
Try it:
  conductor prompt --connect ws://127.0.0.1:8765/acp --token TOKEN "hello"
"""


def _setup_logging(level: str, log_file: str | None) -> None:
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(
        logging.Formatter("[conductor +%(relativeCreated).1fms] %(levelname)s %(message)s")
    )
    root = logging.getLogger("conductor")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def _load(path: str, try_plugins: bool = False) -> Chain:
    """Load a chain file or exit with status 2 and a one-paragraph error."""
    try:
        return load_chain(path, try_plugins=try_plugins)
    except ChainError as exc:
        click.echo(f"conductor: {exc}", err=True)
        sys.exit(2)


def _fail(message: str) -> NoReturn:
    click.echo(f"conductor: {message}", err=True)
    sys.exit(2)


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="conductor")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    help="How much the conductor itself reports (to stderr or --log-file).",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False),
    help="Write the conductor's log here instead of stderr. With --log-level debug it shows "
    "every line in and out of every component.",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    help="Append a JSON Lines trace of every logical message to this file "
    "(format: docs/trace-format.md).",
)
@click.pass_context
def cli(ctx: click.Context, log_level: str, log_file: str | None, trace: str | None) -> None:
    """Run chains of ACP proxies in front of an ACP agent, presented to an editor as one agent.

    A chain file (TOML) lists [[proxy]] components, nearest the editor first,
    and one [agent]; see the README for its keys.
    """
    _setup_logging(log_level, log_file)
    ctx.obj = {"trace": trace, "log_level": log_level, "log_file": log_file}


@cli.command()
@click.argument("chain", type=click.Path(dir_okay=False))
@click.option(
    "--grace",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds the editor's in-flight requests get to finish after it closes stdin, and "
    "then seconds children get to exit after their stdin is closed (before SIGTERM).",
)
@click.pass_obj
def run(settings: dict[str, Any], chain: str, grace: float) -> None:
    """Run CHAIN as one ACP agent over stdin/stdout (what an editor launches).

    Components start on the first `initialize`. Stdout carries JSON-RPC only;
    every component's stderr is forwarded to stderr prefixed with its name.
    Exits 0 when the editor closes stdin (or on SIGTERM/SIGINT), 1 when a
    component dies, 2 for a bad chain file.
    """
    from . import loop
    from .runner import ChainRunner
    from .trace import Tracer

    loaded = _load(chain)
    try:
        trace = Tracer.open(settings["trace"]) if settings["trace"] else None
        runner = ChainRunner(loaded, grace=grace, reap_orphans=True, trace=trace)
    except PluginError as exc:
        _fail(f"{loaded.path}: {exc}")
    sys.exit(loop.run(runner.run))


class ByteSize(click.ParamType):  # type: ignore[type-arg]
    """A size in bytes: 1048576, 512K, 64M, 1G."""

    name = "SIZE"
    UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in self.UNITS else ""
        number = text[: len(text) - len(unit)]
        if not number.isdigit() or int(number) <= 0:
            self.fail(f"{value!r} is not a size like 1048576, 512K, 64M or 1G", param, ctx)
        return int(number) * self.UNITS[unit]


def _parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, or a bare PORT (on 127.0.0.1)."""
    if text.isdigit():
        host, port = "127.0.0.1", text
    elif text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        _fail(
            f"--listen {text!r}: expected HOST:PORT (127.0.0.1:8765; 0.0.0.0:8765 for every "
            "interface; port 0 picks a free one)"
        )
    return host, int(port)


@cli.command(epilog=SERVE_EPILOG)
@click.argument("chain", type=click.Path(dir_okay=False))
@click.option(
    "--listen",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to listen. Loopback unless you name another address (0.0.0.0 = every "
    "interface, which needs an explicit token). Port 0 picks a free port; the actual "
    "ws://HOST:PORT/acp is printed on stderr.",
)
@click.option(
    "--token",
    envvar="ACP_CONDUCTOR_TOKEN",
    show_envvar=True,
    help="Bearer token clients must present (Authorization: Bearer TOKEN, or "
    "?access_token=TOKEN). Prefer the environment variable: arguments are visible in ps. "
    "On loopback without one, a random token is generated and printed on stderr.",
)
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="ORIGIN",
    help="A browser Origin allowed to connect, e.g. https://editor.example (repeatable; '*' "
    "allows any). Requests that carry an Origin not listed get 403; clients that send no "
    "Origin (editors, CLIs) are not affected.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=16,
    show_default=True,
    help="Concurrent connections (each runs its own chain); one more is accepted and closed "
    "at once with code 1013 and the reason.",
)
@click.option(
    "--max-frame-size",
    type=ByteSize(),
    default="64M",
    show_default=True,
    help="Largest message a client may send (one JSON-RPC message per frame); a larger one "
    "closes the connection with code 1009.",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(0),
    default=3600.0,
    show_default=True,
    help="Seconds without a message in either direction, and with no request waiting for "
    "its answer, before a connection is closed (code 1001); 0 never closes it.",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, exists=True),
    help="Serve wss:// with this PEM certificate (chain); --tls-key if the key is separate.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, exists=True),
    help="The PEM private key for --tls-cert.",
)
@click.option(
    "--grace",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds a closing connection's components get to exit after their stdin is "
    "closed (before SIGTERM).",
)
@click.pass_obj
def serve(
    settings: dict[str, Any],
    chain: str,
    listen: str,
    token: str | None,
    origins: tuple[str, ...],
    max_connections: int,
    max_frame_size: int,
    idle_timeout: float,
    tls_cert: str | None,
    tls_key: str | None,
    grace: float,
) -> None:
    """Serve CHAIN over WebSocket: a fresh chain instance per connection.

    Clients connect to ws://HOST:PORT/acp (the WebSocket profile of the ACP
    remote transport) with a bearer token, send `initialize`, and talk ACP
    with one JSON-RPC message per text frame. Each connection gets its own
    proxies and agent processes, stopped when it closes. SIGTERM or SIGINT
    closes every connection with a close frame and stops every chain.
    One line per connection opened and closed goes to stderr; with the global
    --trace FILE, each connection writes its own trace, named after FILE and
    the connection id.
    """
    import ssl

    from .serve import ServeOptions, is_loopback, new_token, run_server

    host, port = _parse_listen(listen)
    loaded = _load(chain, try_plugins=True)
    generated = False
    if not token:
        if not is_loopback(host):
            _fail(
                f"refusing to listen on {host} (not loopback) without a token: set "
                "ACP_CONDUCTOR_TOKEN or pass --token"
            )
        token, generated = new_token(), True
    if tls_key and not tls_cert:
        _fail("--tls-key needs --tls-cert")
    context = None
    if tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(tls_cert, tls_key)
        except (ssl.SSLError, OSError) as exc:
            _fail(f"cannot load --tls-cert/--tls-key: {exc}")
    options = ServeOptions(
        host=host,
        port=port,
        token=token,
        allowed_origins=frozenset(o.rstrip("/").lower() for o in origins),
        max_connections=max_connections,
        max_frame_size=max_frame_size,
        idle_timeout=idle_timeout,
        ssl_context=context,
        grace=grace,
        trace=settings["trace"],
    )
    level = logging.getLogger("conductor").level
    logging.getLogger("conductor.serve").setLevel(
        min(level, logging.INFO) if level <= logging.WARNING else level
    )
    sys.exit(run_server(loaded, options, generated))


@cli.command()
@click.argument("chain", type=click.Path(dir_okay=False))
def check(chain: str) -> None:
    """Validate CHAIN and print the resolved chain (exit status 2 if it is bad).

    Nothing is started: commands are resolved (python/python3 mean the
    interpreter running the conductor; relative paths are taken from the chain
    file's folder) and checked to exist.
    """
    click.echo(_load(chain, try_plugins=True).describe())


@cli.command()
@click.argument("chain", required=False, type=click.Path(dir_okay=False))
@click.argument("text", nargs=-1)
@click.option(
    "-p", "--prompt", "prompts", multiple=True, help="A prompt to send (repeatable; after TEXT)."
)
@click.option(
    "--repl", is_flag=True, help="Then read more prompts from stdin, one per line, until EOF."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the raw session/update stream as JSON Lines."
)
@click.option("--yes", "permission", flag_value="yes", help="Allow every permission request.")
@click.option("--no", "permission", flag_value="no", help="Reject every permission request.")
@click.option(
    "--protocol",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="ACP protocol version to request (1, or 2 for the draft v2).",
)
@click.option(
    "--session-cwd",
    type=click.Path(file_okay=False),
    help="Working folder for the session (default: here).",
)
@click.option(
    "--connect",
    metavar="URL",
    help="Talk to a served chain (ws://HOST:PORT/acp or wss://, e.g. `conductor serve`) "
    "instead of starting CHAIN; then every argument is a prompt.",
)
@click.option(
    "--token",
    envvar="ACP_CONDUCTOR_TOKEN",
    show_envvar=True,
    help="Bearer token for --connect (sent as Authorization: Bearer TOKEN).",
)
@click.pass_obj
def prompt(
    settings: dict[str, Any],
    chain: str | None,
    text: tuple[str, ...],
    permission: str | None,
    protocol: int,
    session_cwd: str | None,
    prompts: tuple[str, ...],
    repl: bool,
    as_json: bool,
    connect: str | None,
    token: str | None,
) -> None:
    """Try CHAIN without an editor: send TEXT as a prompt and stream the reply.

    With --connect URL the chain is one served by `conductor serve` (or any ACP
    WebSocket server) and CHAIN is left out: `prompt --connect URL TEXT...`.

    Each TEXT (and each -p) is sent as its own prompt in one session; --repl
    then reads more from stdin. The reply streams to stdout; thoughts, tool
    calls, plans, permission requests and the stop reason go to stderr (in
    colour on a terminal). Permission requests are asked on the terminal
    unless --yes or --no. Ctrl-C once cancels the turn (session/cancel);
    twice quits. Exit status: 0 for end_turn, 3 max tokens, 4 refusal,
    5 cancelled, 1 error, 2 bad chain file.
    """
    from .prompt import PromptOptions, run_prompt

    if connect is not None:
        if not connect.startswith(("ws://", "wss://")):
            _fail(f"--connect {connect!r}: expected a ws:// or wss:// URL")
        text = (chain, *text) if chain is not None else text
        chain = None
    elif chain is None:
        _fail("give a CHAIN file (or --connect URL of a served chain)")
    else:
        _load(chain)
    texts = [*text, *prompts]
    if not texts and not repl:
        _fail("give a prompt (TEXT or -p), or --repl to type them")
    passed = ["--log-level", settings["log_level"]]
    for key in ("log_file", "trace"):
        if settings[key]:
            passed += [f"--{key.replace('_', '-')}", str(Path(settings[key]).absolute())]
    options = PromptOptions(
        chain=Path(chain).absolute() if chain is not None else None,
        connect=connect,
        headers={"Authorization": f"Bearer {token}"} if connect and token else {},
        texts=texts,
        json=as_json,
        repl=repl,
        protocol=protocol,
        permission=permission or "ask",
        cwd=str(Path(session_cwd).absolute()) if session_cwd else str(Path.cwd()),
        conductor_args=passed,
    )
    sys.exit(run_prompt(options))


def _option_value(text: str) -> Any:
    """`--option` values: JSON when they parse as JSON (numbers, booleans, lists), else text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@cli.command()
@click.argument("plugin")
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An option for the plugin factory (repeatable); VALUE is JSON if it parses, else text.",
)
@click.option("--name", help="Name used in errors and logs (default: from PLUGIN).")
def proxy(plugin: str, options: tuple[str, ...], name: str | None) -> None:
    """Run one Python plugin proxy standalone over stdin/stdout.

    PLUGIN is 'module:factory' or the name of an installed plugin (entry-point
    group acp_conductor.proxies). The process is an ordinary ACP proxy
    component (it answers _proxy/initialize and speaks _proxy/successor), so
    any conductor can run it, e.g. in a chain file:

    \b
      [[proxy]]
      command = ["conductor", "proxy", "proxies.arrow:ArrowProxy", "-o", "prefix=>> "]
    """
    from . import loop
    from .runner import ChainRunner
    from .standalone import standalone_chain

    values: dict[str, Any] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--option {item!r}: expected KEY=VALUE")
        values[key] = _option_value(value)
    shown = name or plugin.rpartition(":")[0].rpartition(".")[2] or plugin
    try:
        chain = standalone_chain(plugin, load_factory(plugin, Path.cwd()), values, shown)
        runner = ChainRunner(chain, reap_orphans=True)  # makes the plugin: bad options end here
    except PluginError as exc:
        _fail(str(exc))
    sys.exit(loop.run(runner.run))


@cli.group()
def trace() -> None:
    """Work with trace files written by --trace."""


@trace.command("view")
@click.argument("trace_file", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Where to write the HTML (default: TRACE with .html).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
def trace_view(trace_file: str, output: str | None, open_browser: bool) -> None:
    """Render TRACE as a self-contained HTML sequence diagram.

    One lifeline per component, one arrow per message, requests paired with
    their responses, filters by session and method, and the full payload of
    the arrow you click. The page needs no network.
    """
    from .trace_view import TraceError, read_trace, render

    source = Path(trace_file)
    target = Path(output) if output else source.with_suffix(".html")
    try:
        events = read_trace(source)
    except TraceError as exc:
        _fail(str(exc))
    target.write_text(render(events, f"ACP trace: {source.name}"), encoding="utf-8")
    click.echo(f"{target} ({len(events)} messages)")
    if open_browser:
        import webbrowser

        webbrowser.open(target.absolute().as_uri())


def main() -> None:
    cli(prog_name="conductor")
