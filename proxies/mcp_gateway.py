"""One MCP client's traffic to one MCP-over-ACP server, whatever carries it.

The polyfill serves agents' MCP clients over HTTP and over the stdio bridge;
both come here. A client of the 2026-07-28 revision sends every request with
its `_meta` envelope, which is relayed as is. A client of the older revisions
begins with `initialize`: that handshake is answered here (with what the
server's `server/discover` says), and each later request is relayed with the
2026 envelope filled in from it. Each request becomes one `mcp/message`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from conductor.mcp_tools import (
    MCP_PROTOCOL_VERSION,
    META_CAPABILITIES,
    META_CLIENT_INFO,
    META_SERVER_INFO,
    META_VERSION,
)
from conductor.plugin import Context, ProxyRequestError
from conductor.protocol import INVALID_REQUEST

__all__ = ["LEGACY_VERSIONS", "Client", "Endpoint", "Gateway"]

# Handshake-era revisions we answer `initialize` for, newest first.
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# Result members only the 2026 revision defines: not shown to handshake-era clients.
MODERN_ONLY = ("resultType", "ttlMs", "cacheScope")

Emit = Callable[[dict[str, Any]], None]


@attrs.define(eq=False)
class Client:
    """One MCP client: a legacy HTTP session, or one bridge connection (`version` once shaken)."""

    version: str | None = None
    capabilities: dict[str, Any] = attrs.field(factory=dict)
    info: dict[str, Any] | None = None
    running: dict[Any, trio.CancelScope] = attrs.field(factory=dict)  # request id -> its scope


@attrs.define(eq=False)
class Endpoint:
    """One rewritten `acp` declaration: the server it reaches and the secret that opens it."""

    server_id: str
    name: str
    key: str  # the URL path segment
    token: str
    sessions: dict[str, Client] = attrs.field(factory=dict)  # Mcp-Session-Id -> legacy client
    discovered: dict[str, Any] | None = None  # the server's discover result, once fetched


def response(request_id: Any, outcome: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC response carrying an MCP outcome (`{"result"}` or `{"error"}`)."""
    key = "error" if "error" in outcome and "result" not in outcome else "result"
    return {"jsonrpc": "2.0", "id": request_id, key: outcome[key]}


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def is_modern(message: dict[str, Any]) -> bool:
    """Whether a request carries the 2026 `_meta` envelope."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_VERSION in meta


class Gateway:
    """Relays MCP messages of the agent's clients to one endpoint's server, as `mcp/message`."""

    def __init__(self, ctx: Context, endpoint: Endpoint) -> None:
        self.ctx = ctx
        self.endpoint = endpoint

    async def handle(
        self, message: dict[str, Any], client: Client | None, emit: Emit
    ) -> dict[str, Any] | None:
        """Answer one message (None for a notification, or a request cancelled by its client).

        `client` is None for a 2026 request over HTTP (stateless); `emit` gets the
        server's notifications for this request, as JSON-RPC notifications.
        """
        method = message.get("method")
        request_id = message.get("id")
        if "id" not in message:
            self._notification(message, client)
            return None
        params = message.get("params")
        params = dict(params) if isinstance(params, dict) else {}
        legacy = not is_modern(message)
        if legacy:
            if method == "initialize":
                assert client is not None
                return await self._handshake(request_id, params, client)
            if client is None or client.version is None:
                return error(request_id, INVALID_REQUEST, "send initialize first")
            if method == "ping":
                return {"jsonrpc": "2.0", "id": request_id, "result": {}}
            params["_meta"] = {**(params.get("_meta") or {}), **self._envelope(client)}
        outcome = await self._relay(request_id, str(method), params, client, emit)
        if outcome is None:
            return None
        if legacy and isinstance(outcome.get("result"), dict):
            outcome = {
                "result": {k: v for k, v in outcome["result"].items() if k not in MODERN_ONLY}
            }
        return response(request_id, outcome)

    def _notification(self, message: dict[str, Any], client: Client | None) -> None:
        """The only client notification that matters: cancelling one of its requests."""
        params = message.get("params")
        if message.get("method") == "notifications/cancelled" and isinstance(params, dict):
            scope = client.running.get(params.get("requestId")) if client else None
            if scope is not None:
                scope.cancel()

    async def _relay(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any],
        client: Client | None,
        emit: Emit,
    ) -> dict[str, Any] | None:
        def notify(inner: dict[str, Any]) -> None:
            note: dict[str, Any] = {"jsonrpc": "2.0", "method": inner.get("method")}
            if inner.get("params") is not None:
                note["params"] = inner["params"]
            emit(note)

        outcome: dict[str, Any] | None = None
        with trio.CancelScope() as scope:
            if client is not None:
                client.running[request_id] = scope
            try:
                outcome = await self.ctx.mcp_request(
                    self.endpoint.server_id, method, params, on_notification=notify
                )
            except ProxyRequestError as exc:
                # An outer (binding) error: the server is gone, busy, or failed.
                outcome = {"error": {k: v for k, v in exc.error.items() if k != "data"}}
                if "data" in exc.error:
                    outcome["error"]["data"] = exc.error["data"]
            finally:
                if client is not None:
                    client.running.pop(request_id, None)
        return outcome

    def _envelope(self, client: Client) -> dict[str, Any]:
        meta: dict[str, Any] = {
            META_VERSION: MCP_PROTOCOL_VERSION,
            META_CAPABILITIES: client.capabilities,
        }
        if client.info is not None:
            meta[META_CLIENT_INFO] = client.info
        return meta

    async def _handshake(
        self, request_id: Any, params: dict[str, Any], client: Client
    ) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        client.version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
        capabilities = params.get("capabilities")
        client.capabilities = capabilities if isinstance(capabilities, dict) else {}
        info = params.get("clientInfo")
        client.info = info if isinstance(info, dict) else None
        discovered = await self._discover(client)
        meta: dict[str, Any] = (
            discovered["_meta"] if isinstance(discovered.get("_meta"), dict) else {}
        )
        server_info = meta.get(META_SERVER_INFO) or {"name": self.endpoint.name, "version": "0"}
        result: dict[str, Any] = {
            "protocolVersion": client.version,
            "capabilities": discovered.get("capabilities") or {"tools": {}},
            "serverInfo": server_info,
        }
        if isinstance(discovered.get("instructions"), str):
            result["instructions"] = discovered["instructions"]
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def _discover(self, client: Client) -> dict[str, Any]:
        """The server's `server/discover` result (fetched once; {} if it has none)."""
        if self.endpoint.discovered is None:
            try:
                outcome = await self.ctx.mcp_request(
                    self.endpoint.server_id, "server/discover", {"_meta": self._envelope(client)}
                )
            except ProxyRequestError:
                return {}
            result = outcome.get("result")
            if not isinstance(result, dict):
                return {}
            self.endpoint.discovered = result
        return self.endpoint.discovered
