"""ACP over WebSocket: one JSON-RPC message (or batch) per text frame.

The router speaks lines; this module adapts them to frames. `WsWriter` has
the same queue/flush/flow-control contract as `pipes.PipeWriter`, so the runner
treats a WebSocket peer (a served editor, a remote component) like a pipe.
`connect` opens a client connection and turns every way it can fail into
one readable sentence.
"""

from __future__ import annotations

import collections
import contextlib
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import orjson
import trio
import trio_websocket
from trio_websocket import CloseReason, ConnectionClosed, WebSocketConnection

from .flow import Flow, Peer
from .loop import Loop

__all__ = [
    "MAX_MESSAGE",
    "WS_QUEUE",
    "CloseReason",
    "ConnectError",
    "ConnectionClosed",
    "Corker",
    "PauseGate",
    "WebSocketConnection",
    "WsWriter",
    "connection",
    "describe_close",
    "frame_to_line",
    "public_url",
    "read_frames",
]

ACP_PATH = "/acp"
CONNECT_TIMEOUT = 10.0
CORK_LIMIT = 1 << 20  # bytes framed before a held-back burst is sent
MAX_MESSAGE = 1 << 30  # what we accept from a server we connected to: as much as a pipe line
# Frames trio-websocket may hold before we read them: with flow control pausing our reading,
# this (times the frame size limit) is what a WebSocket peer can make us buffer.
WS_QUEUE = 16
CLOSE_NAMES = {
    1000: "normal closure",
    1001: "going away",
    1006: "connection lost",
    1008: "policy violation",
    1009: "message too big",
    1011: "internal error",
    1013: "try again later",
}


class ConnectError(Exception):
    """Opening a WebSocket failed; the message says why (not where, nor any secret)."""


def frame_to_line(text: str) -> bytes:
    """One received text frame as one router line.

    Valid JSON has no raw line breaks inside strings, so breaks in a
    pretty-printed frame are whitespace and become spaces: the line can then
    travel on a newline-delimited pipe unchanged. Invalid JSON is left alone,
    so the peer still gets its parse error.
    """
    data = text.encode("utf-8", "surrogatepass")
    if b"\n" in data or b"\r" in data:
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            return data
        data = data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data


async def read_frames(
    ws: WebSocketConnection,
    deliver: Callable[[list[bytes]], None],
    gate: PauseGate,
    on_frame: Callable[[], None] | None = None,
) -> None:
    """Hand each text frame to `deliver` until the connection closes (binary frames are
    ignored), waiting while flow control pauses the peer."""
    while True:
        await gate.wait()
        try:
            message = await ws.get_message()
        except ConnectionClosed:
            return
        if on_frame is not None:
            on_frame()
        if isinstance(message, bytes):
            continue  # the WebSocket profile carries JSON-RPC in text frames only
        deliver([frame_to_line(message)])


class PauseGate:
    """Lets a trio task reading a peer wait while flow control pauses that peer."""

    def __init__(self, peer: Peer, call_soon_trio: Callable[..., None]) -> None:
        self._peer = peer
        self._call_soon_trio = call_soon_trio
        self._open = trio.Event()
        self._open.set()
        peer.on_pause = self._close
        peer.on_resume = lambda: call_soon_trio(self._reopen)

    def _close(self) -> None:
        if self._open.is_set():
            self._open = trio.Event()

    def _reopen(self) -> None:
        if not self._peer.paused:
            self._open.set()

    async def wait(self) -> None:
        await self._open.wait()


class Corker(Protocol):
    """A stream under a WebSocket that can hold writes back and send them in one piece."""

    def cork(self) -> None: ...

    async def uncork(self) -> None: ...


class WsWriter:
    """Queues lines for one WebSocket peer and sends each as a text frame.

    Lines queue before the connection exists (a remote component is still
    connecting when the router sends it `initialize`); `attach` starts them
    moving. The backlog counts toward the peer's flow control, like a pipe's.
    """

    def __init__(
        self,
        name: str,
        loop: Loop,
        flow: Flow,
        peer: Peer,
        ws: WebSocketConnection | None = None,
        corker: Corker | None = None,
    ) -> None:
        self.name = name
        self.loop = loop
        self.flow = flow
        self.peer = peer
        self.corker = corker  # when given, each burst of frames goes out in one send
        self.ws = ws
        self._queue: list[bytes] = []
        self._backlog: collections.deque[bytes] = collections.deque()
        self._dirty = False
        self._wake = trio.Event()
        self._drained = trio.Event()
        self._drained.set()
        self._attached = trio.Event()
        if ws is not None:
            self._attached.set()
        self.broken = False
        self.on_send: Callable[[], None] | None = None  # activity hook (idle timeout)

    def attach(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self._attached.set()

    def send(self, line: bytes) -> None:
        if self.broken:
            return
        self._queue.append(line)
        self.flow.wrote(self.peer, len(line))
        if not self._dirty:
            self._dirty = True
            self.loop.dirty.append(self)

    def flush(self) -> None:
        self._dirty = False
        queue = self._queue
        if not queue:
            return
        if self.broken:
            queue.clear()
            return
        if not self._backlog:
            self._drained = trio.Event()
            self.loop.call_soon_trio(self._wake.set)
        self._backlog.extend(queue)
        queue.clear()
        if self.on_send is not None:
            self.on_send()

    @property
    def idle(self) -> bool:
        return not self._backlog and not self._queue

    async def wait_drained(self) -> None:
        await self._drained.wait()

    async def drain_forever(self) -> None:
        """Background task: send queued lines, one text frame each, in order."""
        await self._attached.wait()
        assert self.ws is not None
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            backlog = self._backlog
            corker = self.corker
            while backlog and not self.broken:
                if corker is not None:
                    corker.cork()
                held = 0
                try:
                    try:
                        while backlog and held < CORK_LIMIT:
                            line = backlog[0]
                            await self.ws.send_message(line.decode("utf-8", "replace"))
                            backlog.popleft()
                            self.flow.sent(self.peer, len(line))
                            held += len(line)
                    finally:
                        if corker is not None:  # never leave writes held (a close frame may follow)
                            await corker.uncork()
                except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
                    self.broken = True
                    break
            if self.broken:
                backlog.clear()
                self.flow.gone(self.peer)
            self._drained.set()


def describe_close(reason: CloseReason | None) -> str:
    """`code 1011, internal error: agent 'x' exited` for a log line or an error."""
    if reason is None:
        return "connection lost"
    name = CLOSE_NAMES.get(reason.code, reason.name.lower().replace("_", " "))
    text = f"code {reason.code}, {name}"
    return f"{text}: {reason.reason}" if reason.reason else text


def public_url(url: str) -> str:
    """The URL for logs and errors: query values and any password hidden (they may be tokens)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}=***" for k, _ in pairs)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@contextlib.asynccontextmanager
async def connection(
    url: str, headers: dict[str, str], max_message_size: int = MAX_MESSAGE
) -> AsyncIterator[WebSocketConnection]:
    """A client connection to `url` with extra `headers`; ConnectError if it cannot open.

    `wss://` verifies the server against the system's CAs (and SSL_CERT_FILE /
    SSL_CERT_DIR, which the standard library honours). Leaving the block
    closes the connection with a close frame.
    """
    context = ssl.create_default_context() if url.startswith("wss:") else None
    extra = [(k.encode(), v.encode()) for k, v in headers.items()]
    async with contextlib.AsyncExitStack() as stack:
        try:
            if context is not None:
                await _check_tls(url, context)
            ws = await stack.enter_async_context(
                trio_websocket.open_websocket_url(
                    url,
                    context,
                    extra_headers=extra,
                    max_message_size=max_message_size,
                    message_queue_size=WS_QUEUE,
                    connect_timeout=CONNECT_TIMEOUT,
                    disconnect_timeout=2.0,
                )
            )
        except Exception as exc:
            raise ConnectError(_why(exc)) from None
        yield ws


async def _check_tls(url: str, context: ssl.SSLContext) -> None:
    """Complete one TLS handshake with the server and hang up.

    trio-websocket (0.12) does not report a failed TLS handshake: the open
    waits for its timeout instead. Shaking hands first turns an untrusted
    certificate into an immediate, precise error.
    """
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None
    with trio.fail_after(CONNECT_TIMEOUT):
        stream = await trio.open_ssl_over_tcp_stream(
            parts.hostname, parts.port or 443, ssl_context=context, https_compatible=True
        )
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            raise exc.__cause__ if isinstance(exc.__cause__, ssl.SSLError) else exc from None
        finally:
            await trio.aclose_forcefully(stream)


def _why(exc: BaseException) -> str:
    """One phrase for a failed WebSocket open."""
    if isinstance(exc, trio_websocket.ConnectionRejected):
        body = (exc.body or b"").decode("utf-8", "replace").strip()
        return f"the server answered HTTP {exc.status_code}" + (f": {body[:200]}" if body else "")
    if isinstance(exc, trio_websocket.ConnectionTimeout):
        return f"no answer within {CONNECT_TIMEOUT:g} s"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"TLS error: {exc.verify_message or exc.reason} (trust a private CA with SSL_CERT_FILE)"
        )
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    if isinstance(exc, trio.TooSlowError):
        return f"no answer within {CONNECT_TIMEOUT:g} s"
    if isinstance(exc, ConnectionClosed):
        return describe_close(exc.reason)
    if isinstance(exc, trio_websocket.HandshakeError) and exc.__cause__ is not None:
        return _why(exc.__cause__)
    if isinstance(exc, OSError):
        if not exc.strerror and isinstance(exc.__cause__, BaseExceptionGroup):
            first = exc.__cause__.exceptions[
                0
            ]  # trio tried every address: say why the first failed
            if isinstance(first, OSError) and first.strerror:
                return first.strerror.lower()
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__
