"""The polyfill's loopback HTTP endpoint: MCP Streamable HTTP in front of the gateways.

One listener serves every declaration at `/mcp/<key>`, each behind its own
bearer token. 2026-07-28 clients POST one request at a time with routing
headers that must agree with the body; handshake-era clients get an
`Mcp-Session-Id` from `initialize` and send it back. A reply is plain JSON,
or an event stream once the server sends a notification (progress) first.
Closing the connection mid-request cancels it upstream.
"""

from __future__ import annotations

import base64
import hmac
import logging
import math
import secrets
from typing import Any
from urllib.parse import urlsplit

import attrs
import h11
import orjson
import trio

from conductor.protocol import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

from .mcp_gateway import Client, Endpoint, Gateway, error, is_modern

log = logging.getLogger("conductor")

HEADER_MISMATCH = -32020
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
# Inner error codes a 2026 client expects as HTTP statuses rather than 200.
STATUS_OF_ERROR = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    -32021: 400,
    -32022: 400,
    METHOD_NOT_FOUND: 404,
}
NAMED_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
READ_SIZE = 65536
MAX_SESSIONS = 256  # handshake-era sessions kept per endpoint


@attrs.define
class Limits:
    max_body_bytes: int
    max_requests: int  # requests in flight across all endpoints before 429


class _Reply(Exception):
    """An HTTP answer decided before any relaying (an error status)."""

    def __init__(self, status: int, body: dict[str, Any] | None, headers: list[tuple[str, str]]):
        self.status, self.body, self.headers = status, body, headers


def _refuse(status: int, code: int, message: str, *headers: tuple[str, str]) -> _Reply:
    return _Reply(status, error(None, code, message), list(headers))


def _decode_header(value: str) -> str:
    """Header values may come as `=?base64?...?=` when they are not plain ASCII."""
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2]).decode()
        except ValueError:
            return value
    return value


class HttpServer:
    """Serves the endpoints in `endpoints` (by key) to MCP clients over HTTP/1.1."""

    def __init__(
        self, endpoints: dict[str, Endpoint], gateways: dict[str, Gateway], limits: Limits
    ):
        self.endpoints = endpoints
        self.gateways = gateways
        self.limits = limits
        self.active = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        """One connection: requests one after another until either side closes."""
        conn = h11.Connection(h11.SERVER)
        try:
            async with stream:
                while True:
                    request = await self._next_request(conn, stream)
                    if request is None:
                        return
                    await self._exchange(conn, stream, request)
                    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError) as exc:
            log.debug("mcp http connection ended: %s", exc)

    async def _next_request(self, conn: h11.Connection, stream: trio.SocketStream) -> Any:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(READ_SIZE)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                return event
            return None  # ConnectionClosed, or anything unexpected

    async def _read_body(self, conn: h11.Connection, stream: trio.SocketStream) -> bytes | None:
        """The request body, or None when it is over the limit."""
        chunks, size = [], 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(READ_SIZE))
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.limits.max_body_bytes:
                    return None
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            else:
                raise h11.RemoteProtocolError("connection closed inside a request body")

    async def _exchange(
        self, conn: h11.Connection, stream: trio.SocketStream, request: Any
    ) -> None:
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in request.headers}
        try:
            endpoint = self._authorize(request, headers)
            if request.method != b"POST":
                await self._not_post(conn, stream, request, headers, endpoint)
                return
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
                raise _refuse(413, INVALID_REQUEST, "request body too large")
            body = await self._read_body(conn, stream)
            if body is None:
                raise _refuse(413, INVALID_REQUEST, "request body too large")
            if self.active >= self.limits.max_requests:
                raise _refuse(
                    429, INVALID_REQUEST, "too many requests in flight", ("Retry-After", "1")
                )
            message, client, session_header = self._parse(body, headers, endpoint)
        except _Reply as reply:
            await self._send(conn, stream, reply.status, reply.body, reply.headers, close=True)
            return
        self.active += 1
        try:
            await self._relay(conn, stream, message, client, session_header, endpoint)
        finally:
            self.active -= 1

    def _authorize(self, request: Any, headers: dict[str, str]) -> Endpoint:
        path = urlsplit(request.target.decode("latin-1")).path
        prefix, _, key = path.rpartition("/")
        endpoint = self.endpoints.get(key) if prefix == "/mcp" else None
        if endpoint is None:
            raise _refuse(404, INVALID_REQUEST, "no MCP endpoint here")
        expected = f"Bearer {endpoint.token}".encode()
        if not hmac.compare_digest(headers.get("authorization", "").encode(), expected):
            raise _refuse(
                401, INVALID_REQUEST, "missing or wrong credential", ("WWW-Authenticate", "Bearer")
            )
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).hostname not in LOOPBACK_NAMES:
            raise _refuse(403, INVALID_REQUEST, f"origin {origin!r} is not allowed")
        return endpoint

    async def _not_post(
        self,
        conn: h11.Connection,
        stream: trio.SocketStream,
        request: Any,
        headers: dict[str, str],
        endpoint: Endpoint,
    ) -> None:
        """DELETE ends a handshake-era session; nothing else but POST is served (405)."""
        await self._read_body(conn, stream)
        session = headers.get("mcp-session-id")
        if request.method == b"DELETE" and session is not None:
            if endpoint.sessions.pop(session, None) is None:
                raise _refuse(404, INVALID_REQUEST, "no such session")
            await self._send(conn, stream, 200, None, [])
            return
        raise _refuse(405, INVALID_REQUEST, "only POST is served here", ("Allow", "POST"))

    def _parse(
        self, body: bytes, headers: dict[str, str], endpoint: Endpoint
    ) -> tuple[dict[str, Any], Client | None, str | None]:
        """The message, its client (None for a stateless 2026 request), a new session id."""
        if "application/json" not in headers.get("content-type", ""):
            raise _refuse(415, INVALID_REQUEST, "the body must be application/json")
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise _refuse(400, PARSE_ERROR, f"Parse error: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            raise _refuse(400, INVALID_REQUEST, "one JSON-RPC request or notification per POST")
        if is_modern(message):
            _check_routing_headers(message, headers)
            return message, None, None
        session = headers.get("mcp-session-id")
        if message["method"] == "initialize" and "id" in message:
            if len(endpoint.sessions) >= MAX_SESSIONS:
                # Clients rarely end their sessions (DELETE): forget the oldest.
                del endpoint.sessions[next(iter(endpoint.sessions))]
            new_session = secrets.token_urlsafe(16)
            client = endpoint.sessions[new_session] = Client()
            return message, client, new_session
        if session is None:
            raise _refuse(400, INVALID_REQUEST, "Bad Request: Missing session ID")
        known = endpoint.sessions.get(session)
        if known is None:
            raise _refuse(404, INVALID_REQUEST, "Session not found")
        return message, known, None

    async def _relay(
        self,
        conn: h11.Connection,
        stream: trio.SocketStream,
        message: dict[str, Any],
        client: Client | None,
        session_header: str | None,
        endpoint: Endpoint,
    ) -> None:
        gateway = self.gateways[endpoint.key]
        extra = [("Mcp-Session-Id", session_header)] if session_header else []
        if "id" not in message:
            await gateway.handle(message, client, lambda note: None)
            await self._send(conn, stream, 202, None, extra)
            return
        notes_in, notes_out = trio.open_memory_channel[dict[str, Any]](math.inf)
        streaming = False
        answer: dict[str, Any] | None = None
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                nonlocal answer
                answer = await gateway.handle(message, client, notes_in.send_nowait)
                notes_in.close()

            nursery.start_soon(run)
            nursery.start_soon(self._watch_hangup, stream, conn, nursery.cancel_scope)
            async for note in notes_out:
                if not streaming:
                    streaming = True
                    await self._start_events(conn, stream, extra)
                await self._event(conn, stream, note)
            nursery.cancel_scope.cancel()
        if answer is None:
            # Cancelled (by the client's notification or its hang-up): no answer is owed.
            if streaming:
                await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
            else:
                await self._send(conn, stream, 202, None, extra)
            return
        if streaming:
            await self._event(conn, stream, answer)
            await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
            return
        status = 200
        if client is None and "error" in answer:
            # 2026 clients read these as statuses; handshake-era clients want 200 and the body.
            status = STATUS_OF_ERROR.get(answer["error"].get("code"), 200)
        await self._send(conn, stream, status, answer, extra)

    @staticmethod
    async def _watch_hangup(
        stream: trio.SocketStream, conn: h11.Connection, scope: trio.CancelScope
    ) -> None:
        """A client that closes its connection has given up on the request: cancel it."""
        while True:
            data = await stream.receive_some(READ_SIZE)
            if not data:
                scope.cancel()
                return
            conn.receive_data(data)  # a pipelined request: kept for the next cycle

    @staticmethod
    async def _start_events(
        conn: h11.Connection, stream: trio.SocketStream, extra: list[tuple[str, str]]
    ) -> None:
        headers = [
            ("Content-Type", "text/event-stream"),
            ("Cache-Control", "no-cache, no-transform"),
            *extra,
        ]
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)) or b"")

    @staticmethod
    async def _event(
        conn: h11.Connection, stream: trio.SocketStream, message: dict[str, Any]
    ) -> None:
        frame = b"event: message\r\ndata: " + orjson.dumps(message) + b"\r\n\r\n"
        await stream.send_all(conn.send(h11.Data(data=frame)) or b"")

    @staticmethod
    async def _send(
        conn: h11.Connection,
        stream: trio.SocketStream,
        status: int,
        body: dict[str, Any] | None,
        headers: list[tuple[str, str]],
        close: bool = False,
    ) -> None:
        payload = orjson.dumps(body) if body is not None else b""
        all_headers = [*headers, ("Content-Length", str(len(payload)))]
        if body is not None:
            all_headers.append(("Content-Type", "application/json"))
        if close:
            all_headers.append(("Connection", "close"))
        if conn.our_state is not h11.SEND_RESPONSE:
            return
        data = conn.send(h11.Response(status_code=status, headers=all_headers)) or b""
        if payload:
            data += conn.send(h11.Data(data=payload)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)


def _check_routing_headers(message: dict[str, Any], headers: dict[str, str]) -> None:
    """A 2026 request's routing headers must say what its body says (-32020 otherwise)."""
    params = message.get("params") or {}
    version = params["_meta"].get("io.modelcontextprotocol/protocolVersion")
    problems = []
    if _decode_header(headers.get("mcp-protocol-version", "")) != version:
        problems.append(
            "MCP-Protocol-Version does not match the request envelope's protocol version"
        )
    if _decode_header(headers.get("mcp-method", "")) != message["method"]:
        problems.append("Mcp-Method does not match the request body's method")
    named = NAMED_METHODS.get(message["method"])
    if (
        named is not None
        and "id" in message
        and _decode_header(headers.get("mcp-name", "")) != str(params.get(named))
    ):
        problems.append(f"Mcp-Name does not match the request body's {named!r}")
    if problems:
        raise _Reply(400, error(message.get("id"), HEADER_MISMATCH, "; ".join(problems)), [])
