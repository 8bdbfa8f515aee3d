"""The MCP-over-ACP polyfill: `acp` MCP servers for agents that only know stdio or HTTP.

Put it last, just before the agent (`plugin = "mcp_over_acp"`). If the agent
advertises native support (`mcpCapabilities.acp` in v1,
`capabilities.session.mcp.acp` in v2), it passes everything through untouched.
Otherwise it advertises native support upstream, so the editor and the
proxies declare their `acp` servers, and rewrites each declaration in session
setups into one the agent can use: a loopback HTTP endpoint when the agent
advertises HTTP MCP, else a stdio command (a tiny bridge process that
connects back here). Every MCP request the agent's client sends becomes one
`mcp/message` to the server's provider.

Options: `mode = "auto" | "http" | "stdio"`, `max_body_bytes` (413 beyond),
`max_requests` in flight (429 beyond), `bind` (loopback only).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import secrets
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import trio

from conductor import mcp_bridge
from conductor.plugin import Call, Context

from .mcp_gateway import Client, Endpoint, Gateway
from .mcp_http import HttpServer, Limits

log = logging.getLogger("conductor")

MODES = ("auto", "http", "stdio")


def _agent_mcp(result: dict[str, Any], version: int) -> dict[str, Any]:
    """The agent's MCP capabilities object (created if missing, so it can be extended)."""
    if version >= 2:
        capabilities = result.get("capabilities")
        session = capabilities.get("session") if isinstance(capabilities, dict) else None
        if not isinstance(session, dict):
            # No `session` capability (it would promise the v2 session baseline): nothing
            # to extend, so what is set here is not advertised.
            return {}
        mcp = session.get("mcp") or {}
        session["mcp"] = mcp
        return mcp
    capabilities = result.get("agentCapabilities") or {}
    result["agentCapabilities"] = capabilities
    mcp = capabilities.get("mcpCapabilities") or {}
    capabilities["mcpCapabilities"] = mcp
    return mcp


def _supported(mcp: dict[str, Any], kind: str, version: int) -> bool:
    value = mcp.get(kind)
    return value is True if version < 2 else isinstance(value, dict)


class McpOverAcpProxy:
    """The polyfill; see the module docstring."""

    def __init__(
        self,
        mode: str = "auto",
        max_body_bytes: int = 4 * 1024 * 1024,
        max_requests: int = 32,
        bind: str = "127.0.0.1",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if bind != "localhost" and not ipaddress.ip_address(bind).is_loopback:
            raise ValueError(f"bind {bind!r} refused: MCP endpoints listen on loopback only")
        self.mode = mode
        self.bind = bind
        self.limits = Limits(max_body_bytes=max_body_bytes, max_requests=max_requests)
        self.native: bool | None = None  # decided by the agent's initialize answer
        self.transport = "stdio"
        self.version = 1
        self.endpoints: dict[str, Endpoint] = {}
        self.gateways: dict[str, Gateway] = {}
        self.ctx: Context | None = None
        self._http_url: str | None = None
        self._bridge_address: str | None = None
        self._listening = trio.Lock()

    async def on_start(self, ctx: Context) -> None:
        self.ctx = ctx

    async def on_initialize(self, call: Call) -> None:
        reply = await call.forward()
        if reply is None or not reply.ok or not isinstance(reply.result, dict):
            return
        result = reply.result
        version = result.get("protocolVersion")
        self.version = version if isinstance(version, int) else 1
        mcp = _agent_mcp(result, self.version)
        self.native = _supported(mcp, "acp", self.version)
        if self.native:
            log.info("mcp_over_acp: the agent supports MCP over ACP; passing it through")
            return
        http = _supported(mcp, "http", self.version)
        self.transport = self.mode if self.mode != "auto" else ("http" if http else "stdio")
        mcp["acp"] = True if self.version < 2 else {}

    async def on_session_new(self, call: Call) -> None:
        await self._rewrite_setup(call)

    async def on_session_load(self, call: Call) -> None:
        await self._rewrite_setup(call)

    async def on_session_resume(self, call: Call) -> None:
        await self._rewrite_setup(call)

    async def on_session_fork(self, call: Call) -> None:
        await self._rewrite_setup(call)

    async def _rewrite_setup(self, call: Call) -> None:
        """Rewrite the `acp` declarations of a session setup; every other server passes."""
        servers = call.params.get("mcpServers") if isinstance(call.params, dict) else None
        if self.native is not False or call.source != "editor" or not isinstance(servers, list):
            return
        for index, server in enumerate(servers):
            if isinstance(server, dict) and server.get("type") == "acp":
                servers[index] = await self._rewrite(server)

    # ------------------------------------------------------------ declarations

    async def _rewrite(self, server: dict[str, Any]) -> dict[str, Any]:
        """One `acp` declaration as an HTTP or stdio server reaching the same provider."""
        assert self.ctx is not None
        endpoint = Endpoint(
            server_id=str(server.get("serverId")),
            name=str(server.get("name", "mcp")),
            key=secrets.token_urlsafe(12),
            token=secrets.token_urlsafe(32),
        )
        self.endpoints[endpoint.key] = endpoint
        self.gateways[endpoint.key] = Gateway(self.ctx, endpoint)
        await self._listen()
        if self.transport == "http":
            declared: dict[str, Any] = {
                "type": "http",
                "name": endpoint.name,
                "url": f"{self._http_url}/mcp/{endpoint.key}",
                "headers": [{"name": "Authorization", "value": f"Bearer {endpoint.token}"}],
            }
        else:
            declared = {"type": "stdio"} if self.version >= 2 else {}
            declared |= {
                "name": endpoint.name,
                "command": sys.executable,
                "args": ["-I", str(Path(mcp_bridge.__file__).resolve())],
                "env": [
                    {"name": mcp_bridge.ADDRESS, "value": self._bridge_address},
                    {"name": mcp_bridge.TOKEN, "value": endpoint.token},
                ],
            }
        if "_meta" in server:
            declared["_meta"] = server["_meta"]
        where = declared.get("url") or f"stdio bridge via {self._bridge_address}"
        log.info(
            "mcp_over_acp: %r (serverId %s) offered as %s", endpoint.name, endpoint.server_id, where
        )
        return declared

    async def _listen(self) -> None:
        """Open the listener this chain's transport needs (once)."""
        assert self.ctx is not None
        async with self._listening:
            if self.transport == "http" and self._http_url is None:
                server = HttpServer(self.endpoints, self.gateways, self.limits)
                port = await self._serve(server.serve)
                self._http_url = f"http://{self._host_for_url()}:{port}"
            elif self.transport == "stdio" and self._bridge_address is None:
                port = await self._serve(self._serve_bridge)
                self._bridge_address = f"{self._host_for_url(bare=True)}:{port}"

    async def _serve(self, handler: Callable[[trio.SocketStream], Awaitable[None]]) -> int:
        """Listen on an ephemeral loopback port; each connection is served on its own."""
        assert self.ctx is not None

        async def guarded(stream: trio.SocketStream) -> None:
            # One client's trouble must never take the listener (or the chain) down.
            try:
                await handler(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            except Exception:
                log.exception("mcp_over_acp: a connection failed")
            finally:
                await trio.aclose_forcefully(stream)

        listeners = await trio.open_tcp_listeners(0, host=self.bind)
        self.ctx.start_soon(trio.serve_listeners, guarded, listeners)
        return int(listeners[0].socket.getsockname()[1])

    def _host_for_url(self, bare: bool = False) -> str:
        host = "127.0.0.1" if self.bind == "localhost" else self.bind
        return f"[{host}]" if ":" in host and not bare else host

    # --------------------------------------------------------- stdio bridges

    async def _serve_bridge(self, stream: trio.SocketStream) -> None:
        """One bridge process: its first line names the credential, then MCP lines flow."""
        lines = _Lines(stream, self.limits.max_body_bytes)
        async with stream:
            try:
                hello = orjson.loads(await lines.next() or b"{}")
            except orjson.JSONDecodeError:
                return
            endpoint = self._endpoint_for(
                str(hello.get("token", "")) if isinstance(hello, dict) else ""
            )
            if endpoint is None:
                log.warning("mcp_over_acp: a bridge connected with a wrong credential (closed)")
                return
            gateway, client = self.gateways[endpoint.key], Client()
            # One outgoing queue, so a request's notifications stay ahead of its answer.
            out_in, out = trio.open_memory_channel[dict[str, Any]](math.inf)

            async def one(message: dict[str, Any]) -> None:
                answer = await gateway.handle(message, client, out_in.send_nowait)
                if answer is not None:
                    out_in.send_nowait(answer)

            async def write_out() -> None:
                async for message in out:
                    await stream.send_all(orjson.dumps(message) + b"\n")

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(write_out)
                    async with trio.open_nursery() as requests:
                        while (line := await lines.next()) is not None:
                            message = _parse_line(line)
                            if isinstance(message, dict) and "method" in message:
                                requests.start_soon(one, message)
                            elif message is not None:
                                out_in.send_nowait(message)  # an error answer for a bad line
                    out_in.close()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    def _endpoint_for(self, token: str) -> Endpoint | None:
        found = None
        for endpoint in self.endpoints.values():
            if hmac.compare_digest(endpoint.token.encode(), token.encode()):
                found = endpoint
        return found


def _parse_line(line: bytes) -> Any:
    """A message from a bridge, or the JSON-RPC error to send back for a bad line."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": f"Parse error: {exc}"},
        }


class _Lines:
    """Newline-delimited messages from a stream (None at the end)."""

    def __init__(self, stream: trio.SocketStream, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.buffer = bytearray()

    async def next(self) -> bytes | None:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                if line.strip():
                    return line
                continue
            if len(self.buffer) > self.limit:
                raise trio.BrokenResourceError("a message over the size limit (max_body_bytes)")
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buffer += data
