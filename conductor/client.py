"""A small ACP client endpoint over trio byte streams (used by `conductor prompt`).

It is a plain JSON-RPC peer: `request` awaits the matching response, incoming
requests go to `on_request`, incoming notifications to `on_notification`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import trio

from .framing import LineSplitter
from .protocol import INTERNAL_ERROR
from .wsio import ConnectionClosed, WebSocketConnection, describe_close

log = logging.getLogger("conductor.client")

RequestHandler = Callable[[str, Any], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], Awaitable[None] | None]


class RpcError(Exception):
    """A JSON-RPC error response."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        self.code = error.get("code")
        super().__init__(f"{error.get('message', 'error')} ({self.code})")


class ConnectionLost(Exception):
    """The peer closed the connection while requests were pending."""


class ClientConnection:
    """JSON-RPC over newline-delimited JSON on a pair of trio streams (see the subclass for
    WebSocket)."""

    def __init__(
        self,
        send_stream: trio.abc.SendStream | None,
        receive_stream: trio.abc.ReceiveStream | None,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
    ) -> None:
        self._send_stream = send_stream
        self._receive_stream = receive_stream
        self._on_request = on_request
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._send_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self.closed = trio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self._write(orjson.dumps(message))

    async def _write(self, line: bytes) -> None:
        assert self._send_stream is not None
        await self._send_stream.send_all(line + b"\n")

    async def _incoming(self) -> AsyncIterator[list[bytes]]:
        """Bursts of complete lines until the peer closes."""
        assert self._receive_stream is not None
        splitter = LineSplitter()
        while True:
            data = await self._receive_stream.receive_some(1 << 18)
            if not data:
                return
            yield splitter.feed(bytes(data))

    def _closed_note(self) -> str:
        return ""

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; raise RpcError for an error."""
        request_id = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[request_id] = send
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        try:
            response = await receive.receive()
        except trio.EndOfChannel:
            raise ConnectionLost(
                f"connection closed while waiting for {method}{self._closed_note()}"
            ) from None
        finally:
            self._waiting.pop(request_id, None)
        if "error" in response:
            raise RpcError(response["error"])
        return response.get("result")

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def serve(self) -> None:
        """Read and dispatch messages until the peer closes the stream."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                async for lines in self._incoming():
                    for line in lines:
                        await self._dispatch(line)
                nursery.cancel_scope.cancel()
        finally:
            for channel in self._waiting.values():
                channel.close()
            self.closed.set()

    async def _dispatch(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            log.warning("peer wrote a line that is not JSON: %.200r", line)
            return
        messages = message if isinstance(message, list) else [message]
        for item in messages:
            if not isinstance(item, dict):
                continue
            if "method" in item:
                if "id" in item:
                    assert self._nursery is not None
                    self._nursery.start_soon(self._answer, item)
                else:
                    pending = self._on_notification(item["method"], item.get("params"))
                    if pending is not None:
                        await pending
            elif item.get("id") in self._waiting:
                self._waiting[item["id"]].send_nowait(item)

    async def _answer(self, request: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        try:
            reply["result"] = await self._on_request(request["method"], request.get("params"))
        except RpcError as exc:
            reply["error"] = exc.error
        except Exception as exc:  # a handler bug must still answer the peer
            reply["error"] = {"code": INTERNAL_ERROR, "message": f"client error: {exc}"}
        await self.send(reply)


class WebSocketClientConnection(ClientConnection):
    """The same JSON-RPC peer over a WebSocket: one message per text frame."""

    def __init__(
        self,
        ws: WebSocketConnection,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
    ) -> None:
        super().__init__(None, None, on_request, on_notification)
        self.ws = ws

    async def _write(self, line: bytes) -> None:
        try:
            await self.ws.send_message(line.decode())
        except ConnectionClosed as exc:
            raise ConnectionLost(f"connection closed ({describe_close(exc.reason)})") from None

    async def _incoming(self) -> AsyncIterator[list[bytes]]:
        while True:
            try:
                message = await self.ws.get_message()
            except ConnectionClosed:
                return
            if isinstance(message, str):
                yield [message.encode()]

    def _closed_note(self) -> str:
        return f" ({describe_close(self.ws.closed)})"
