"""`conductor serve`: the chain over WebSocket, a fresh chain instance per connection.

This is the WebSocket profile of the ACP remote transport: `GET /acp` with
`Upgrade: websocket` answers 101 with an `Acp-Connection-Id` header, then one
JSON-RPC message (or batch) per text frame, binary frames ignored. The HTTP
request is read and judged here (path, method, token, Origin) before
trio-websocket sees it, so every refusal is a proper HTTP status with a
one-line body and nothing is started for it.

One process serves every connection, so process-wide duties live here, not
in the per-connection ChainRunner: signals, the subreaper, and sweeping up
orphans. Each connection's processes carry its id in their environment, so
closing one connection never touches another's processes.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import math
import secrets
import signal
import ssl
import sys
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import h11
import trio
import trio_websocket
from trio_websocket import ConnectionClosed, WebSocketConnection

from . import loop
from .chain import Chain
from .plugin import PluginError
from .process import become_subreaper, kill_adopted_orphans, reap_exited_orphans
from .runner import ChainRunner
from .trace import Tracer
from .wsio import ACP_PATH, WS_QUEUE, Corker, PauseGate, WsWriter, describe_close, frame_to_line

log = logging.getLogger("conductor.serve")

CONNECTION_ID_HEADER = b"Acp-Connection-Id"
HANDSHAKE_TIMEOUT = 10.0  # a client that has not sent its request by then is dropped
MAX_HEAD = 16 * 1024  # request line and headers
RECEIVE_SIZE = 1 << 18
REAP_EVERY = 5.0
SHUTDOWN_WAIT = 10.0  # beyond --grace, for closing handshakes


@attrs.frozen
class ServeOptions:
    host: str
    port: int
    token: str
    allowed_origins: frozenset[str] = frozenset()  # "*" allows any Origin
    max_connections: int = 16
    max_frame_size: int = 64 << 20
    idle_timeout: float = 3600.0  # 0: never
    ssl_context: ssl.SSLContext | None = None
    grace: float = 2.0
    trace: str | None = None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def new_token() -> str:
    return secrets.token_urlsafe(24)


class WebSocketEditor:
    """The editor at the far end of one accepted WebSocket (an EditorEnd for ChainRunner)."""

    half_close = False  # a closed WebSocket is gone both ways

    def __init__(
        self, ws: WebSocketConnection, idle_timeout: float, corker: Corker | None = None
    ) -> None:
        self.ws = ws
        self.corker = corker
        self.idle_timeout = idle_timeout
        self.last_activity = trio.current_time()
        self.timed_out = False
        self.shutting_down = False
        # Requests in flight either way: a long silent tool call is not idleness.
        self.busy: Callable[[], bool] = lambda: False
        self.writer: WsWriter | None = None

    def start(self, runner: ChainRunner) -> Callable[[bytes], None]:
        self.writer = WsWriter(
            "editor", runner.loop, runner.flow, runner.editor_peer, self.ws, self.corker
        )
        self.writer.on_send = self._touch
        gate = PauseGate(runner.editor_peer, runner.loop.call_soon_trio)
        nursery = runner.nursery
        nursery.start_soon(self.writer.drain_forever)
        nursery.start_soon(self._read, runner, gate)
        return self.writer.send

    @property
    def idle(self) -> bool:
        return self.writer is None or self.writer.idle or self.writer.broken

    def _touch(self) -> None:
        self.last_activity = trio.current_time()

    def restore(self) -> None:
        return None

    async def _read(self, runner: ChainRunner, gate: PauseGate) -> None:
        runner.editor_left(await self._frames(runner, gate))

    async def _frames(self, runner: ChainRunner, gate: PauseGate) -> str:
        """Hand the editor's frames to the chain until it goes; say why it went."""
        ws = self.ws
        flow, peer = runner.flow, runner.editor_peer
        while True:
            await gate.wait()
            deadline = self.last_activity + self.idle_timeout if self.idle_timeout > 0 else math.inf
            with trio.move_on_at(deadline) as waited:
                try:
                    message = await ws.get_message()
                except ConnectionClosed as exc:
                    return f"the editor closed the connection ({describe_close(exc.reason)})"
            if waited.cancelled_caught:
                if self.busy():
                    self._touch()  # a request is in flight: not idle, start over
                elif trio.current_time() >= self.last_activity + self.idle_timeout:
                    self.timed_out = True
                    return f"idle timeout: no message for {self.idle_timeout:g} s (--idle-timeout)"
                continue  # we sent something meanwhile: wait again
            self._touch()
            if isinstance(message, bytes):
                continue  # the WebSocket profile carries JSON-RPC in text frames only
            previous = flow.begin(peer)
            try:
                runner.from_editor([frame_to_line(message)])
            finally:
                flow.end(previous)

    async def finish(self, runner: ChainRunner) -> None:
        """Close with a code and reason that say why the chain ended."""
        if self.ws.closed is not None:
            return
        if self.timed_out or self.shutting_down:
            code = 1001  # going away
        elif runner.exit_code != 0:
            code = 1011  # internal error: a component failed
        else:
            code = 1000
        with trio.move_on_after(2.0):
            await self.ws.aclose(code, close_reason(runner.end))


def close_reason(text: str) -> str:
    """A close frame's reason holds at most 123 bytes of UTF-8."""
    data = text.encode("utf-8")
    if len(data) <= 123:
        return text
    return data[:120].decode("utf-8", "ignore") + "..."


class _ServerStream(trio.abc.Stream):
    """The accepted TCP (or TLS) stream as trio-websocket sees it.

    It first replays the request head we already read and judged. It can also
    hold writes back (`cork`) so that a burst of frames leaves in one send,
    instead of one system call and one wake-up of the client per frame: that
    is what decides the streaming rate of `session/update` notifications.
    """

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self.prefix = prefix
        self._corked = False
        self._held = bytearray()
        self._send_lock = trio.StrictFIFOLock()  # trio streams allow one send_all at a time

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.prefix:
            size = len(self.prefix) if max_bytes is None else max_bytes
            data, self.prefix = self.prefix[:size], self.prefix[size:]
            return data
        return bytes(await self.inner.receive_some(max_bytes))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._corked:
            self._held += data
            return
        async with self._send_lock:
            await self.inner.send_all(data)

    def cork(self) -> None:
        self._corked = True

    async def uncork(self) -> None:
        """Send what was held back, in one piece."""
        self._corked = False
        if self._held:
            data = bytes(self._held)
            self._held.clear()
            async with self._send_lock:
                await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


@attrs.define
class _Refusal(Exception):
    status: int
    reason: str
    body: str
    headers: list[tuple[str, str]] = attrs.field(factory=list)


class Server:
    """Accepts connections and runs one chain per accepted WebSocket."""

    def __init__(self, chain: Chain, options: ServeOptions) -> None:
        self.chain = chain
        self.options = options
        self.runners: dict[str, ChainRunner] = {}
        self.editors: dict[str, WebSocketEditor] = {}
        self.handshakes: set[trio.CancelScope] = set()
        self.stopping = trio.Event()
        self.accepting = trio.CancelScope()

    async def run(self, listeners: list[trio.abc.Listener[trio.abc.Stream]]) -> int:
        become_subreaper()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._accept, listeners, nursery)
                nursery.start_soon(self._watch_signals, nursery.cancel_scope)
                nursery.start_soon(self._reap_periodically)
                await self.stopping.wait()
                self.accepting.cancel()
                for scope in list(self.handshakes):
                    scope.cancel()
                for conn_id, runner in list(self.runners.items()):
                    self.editors[conn_id].shutting_down = True
                    runner.stop("the server is shutting down")
                with trio.move_on_after(self.options.grace + SHUTDOWN_WAIT):
                    while self.runners:
                        await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
        finally:
            kill_adopted_orphans()
        return 0

    async def _accept(
        self, listeners: list[trio.abc.Listener[trio.abc.Stream]], nursery: trio.Nursery
    ) -> None:
        with self.accepting:
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _watch_signals(self, everything: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if self.stopping.is_set():
                    log.warning("received %s again; stopping now", name)
                    everything.cancel()
                    return
                log.warning(
                    "received %s; closing %d connection(s) and stopping", name, len(self.runners)
                )
                self.stopping.set()

    async def _reap_periodically(self) -> None:
        """Adopted processes that exit on their own must not stay zombies in a long-lived server."""
        while True:
            await trio.sleep(REAP_EVERY)
            keep = {c.process.pid for r in self.runners.values() for c in r.components}
            reap_exited_orphans(keep)

    # ------------------------------------------------------------ handshake

    async def _handle(self, stream: trio.abc.Stream) -> None:
        peer = _peer(stream)
        scope = trio.CancelScope(deadline=trio.current_time() + HANDSHAKE_TIMEOUT)
        self.handshakes.add(scope)
        try:
            with scope:
                try:
                    head = await _read_head(stream)
                    self._judge(head)
                except _Refusal as refusal:
                    log.info(
                        "refused %s: HTTP %d %s", peer, refusal.status, refusal.body.splitlines()[0]
                    )
                    await _send_refusal(stream, refusal)
                    await trio.aclose_forcefully(stream)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
                    await trio.aclose_forcefully(stream)
                    return
            if scope.cancelled_caught:
                await trio.aclose_forcefully(stream)
                return
        finally:
            self.handshakes.discard(scope)
        await self._connection(_ServerStream(stream, head), peer)

    def _judge(self, head: bytes) -> None:
        """Refuse the request unless it is an authorised WebSocket upgrade to /acp."""
        parser = h11.Connection(h11.SERVER)
        parser.receive_data(head)
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            raise _Refusal(400, "Bad Request", f"bad HTTP request: {exc}") from None
        if not isinstance(event, h11.Request):
            raise _Refusal(400, "Bad Request", "bad HTTP request")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        target = urllib.parse.urlsplit(event.target.decode("latin-1"))
        if target.path != ACP_PATH:
            raise _Refusal(404, "Not Found", f"no such endpoint; ACP is served at {ACP_PATH}")
        if event.method != b"GET":
            raise _Refusal(
                405,
                "Method Not Allowed",
                "this server speaks the WebSocket profile of the ACP transport only: "
                f"GET {ACP_PATH} with Upgrade: websocket",
                [("Allow", "GET")],
            )
        if "websocket" not in headers.get("upgrade", "").lower():
            raise _Refusal(
                426,
                "Upgrade Required",
                f"connect with a WebSocket client: GET {ACP_PATH} with Upgrade: websocket",
                [("Upgrade", "websocket"), ("Connection", "Upgrade")],
            )
        self._check_token(headers.get("authorization"), target.query)
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            raise _Refusal(
                403,
                "Forbidden",
                f"origin {origin!r} is not allowed (the server's --allow-origin list)",
            )
        if "sec-websocket-key" not in headers:
            raise _Refusal(400, "Bad Request", "missing Sec-WebSocket-Key")
        if headers.get("sec-websocket-version") != "13":
            raise _Refusal(
                426,
                "Upgrade Required",
                "unsupported WebSocket version; use 13",
                [("Sec-WebSocket-Version", "13")],
            )

    def _check_token(self, authorization: str | None, query: str) -> None:
        """Bearer token from the Authorization header or ?access_token=, compared in constant time."""
        given = None
        if authorization is not None:
            scheme, _, value = authorization.strip().partition(" ")
            if scheme.lower() == "bearer":
                given = value.strip()
        if given is None:
            values = urllib.parse.parse_qs(query).get("access_token")
            if values:
                given = values[0]
        challenge = [("WWW-Authenticate", 'Bearer realm="acp"')]
        if not given:
            raise _Refusal(
                401,
                "Unauthorized",
                "a bearer token is required: send 'Authorization: Bearer TOKEN' "
                "or add ?access_token=TOKEN to the URL",
                challenge,
            )
        if not hmac.compare_digest(given.encode(), self.options.token.encode()):
            raise _Refusal(401, "Unauthorized", "wrong token", challenge)

    def _origin_allowed(self, origin: str) -> bool:
        allowed = self.options.allowed_origins
        return "*" in allowed or origin.rstrip("/").lower() in allowed

    # ----------------------------------------------------------- connection

    async def _connection(self, stream: _ServerStream, peer: str) -> None:
        conn_id = str(uuid.uuid4())
        short = conn_id[:8]
        options = self.options
        async with trio.open_nursery() as nursery:
            with trio.move_on_after(HANDSHAKE_TIMEOUT) as handshake:
                request = await trio_websocket.wrap_server_stream(
                    nursery,
                    stream,
                    message_queue_size=WS_QUEUE,
                    max_message_size=options.max_frame_size,
                    receive_buffer_size=RECEIVE_SIZE,
                )
                ws = await request.accept(extra_headers=[(CONNECTION_ID_HEADER, conn_id.encode())])
            if handshake.cancelled_caught:
                nursery.cancel_scope.cancel()
                await trio.aclose_forcefully(stream)
                return
            try:
                if self.stopping.is_set():
                    await ws.aclose(1001, "the server is shutting down")
                    return
                if len(self.runners) >= options.max_connections:
                    log.info("refused %s: %d connections open", peer, len(self.runners))
                    await ws.aclose(
                        1013,
                        f"server busy: {options.max_connections} connections open "
                        "(--max-connections); try again later",
                    )
                    return
                await self._run_chain(ws, stream, conn_id, short, peer)
            finally:
                with trio.move_on_after(2.0):
                    await ws.aclose()
                nursery.cancel_scope.cancel()

    async def _run_chain(
        self, ws: WebSocketConnection, stream: _ServerStream, conn_id: str, short: str, peer: str
    ) -> None:
        options = self.options
        editor = WebSocketEditor(ws, options.idle_timeout, stream)
        trace = None
        try:
            if options.trace:
                path = Path(options.trace)
                trace = Tracer.open(str(path.with_name(f"{path.stem}-{short}{path.suffix}")))
            runner = ChainRunner(
                self.chain,
                editor,
                grace=options.grace,
                trace=trace,
                watch_signals=False,
                tag=conn_id,
                label=f"{short} ",
            )
        except (PluginError, OSError) as exc:
            log.error("connection %s: cannot start the chain: %s", short, exc)
            await ws.aclose(1011, close_reason(f"cannot start the chain: {exc}"))
            return
        editor.busy = lambda: bool(runner.editor.incoming or runner.editor.pending)
        self.runners[conn_id] = runner
        self.editors[conn_id] = editor
        started = trio.current_time()
        log.info("connection %s opened from %s (%d open)", short, peer, len(self.runners))
        try:
            status = await runner.run()
        finally:
            del self.runners[conn_id]
            del self.editors[conn_id]
        log.info(
            "connection %s closed after %.1f s: %s%s",
            short,
            trio.current_time() - started,
            runner.end or "closed",
            "" if status == 0 else f", status {status}",
        )


def _peer(stream: trio.abc.Stream) -> str:
    inner = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    if not isinstance(inner, trio.SocketStream):
        return "?"
    try:
        host, port = inner.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


async def _read_head(stream: trio.abc.Stream) -> bytes:
    """Bytes up to the end of the HTTP request head (and whatever came with them)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise _Refusal(431, "Request Header Fields Too Large", "request head too large")
        chunk = await stream.receive_some(MAX_HEAD)
        if not chunk:
            raise trio.BrokenResourceError("the client closed before sending a request")
        data += chunk
    return data


async def _send_refusal(stream: trio.abc.Stream, refusal: _Refusal) -> None:
    body = (refusal.body + "\n").encode("utf-8")
    lines = [
        f"HTTP/1.1 {refusal.status} {refusal.reason}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in refusal.headers if k.lower() != "connection"),
        "Connection: close",
    ]
    with trio.move_on_after(2.0):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


async def open_listeners(
    host: str, port: int, context: ssl.SSLContext | None
) -> list[trio.abc.Listener[trio.abc.Stream]]:
    """Listen on host:port (raises OSError, e.g. when the port is taken)."""
    bind = "127.0.0.1" if host == "localhost" else host
    sockets = await trio.open_tcp_listeners(port, host=bind)
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = []
    for sock in sockets:
        if context is None:
            listeners.append(sock)
        else:
            listeners.append(trio.SSLListener(sock, context, https_compatible=True))
    return listeners


def listener_urls(listeners: list[trio.abc.Listener[trio.abc.Stream]], tls: bool) -> list[str]:
    urls = []
    for listener in listeners:
        inner = listener.transport_listener if isinstance(listener, trio.SSLListener) else listener
        assert isinstance(inner, trio.SocketListener)
        host, port = inner.socket.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        urls.append(f"{'wss' if tls else 'ws'}://{shown}:{port}{ACP_PATH}")
    return urls


def run_server(chain: Chain, options: ServeOptions, generated_token: bool) -> int:
    """Bind, announce on stderr, serve until SIGTERM/SIGINT. Exit 0, or 2 if it cannot listen.

    The `listening on URL` lines come last, so a script that waits for them has seen the rest.
    """

    async def main() -> int:
        try:
            listeners = await open_listeners(options.host, options.port, options.ssl_context)
        except OSError as exc:
            print(
                f"conductor: cannot listen on {options.host}:{options.port}: {exc.strerror or exc}",
                file=sys.stderr,
                flush=True,
            )
            return 2
        if generated_token:
            print(
                f"token: {options.token}  (generated for this run; set ACP_CONDUCTOR_TOKEN "
                "or --token to choose one)",
                file=sys.stderr,
                flush=True,
            )
        for url in listener_urls(listeners, options.ssl_context is not None):
            print(f"listening on {url}", file=sys.stderr, flush=True)
        return await Server(chain, options).run(listeners)

    return int(loop.run(main))
