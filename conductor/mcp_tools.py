"""MCP tools offered by a proxy plugin, served over ACP's `mcp/message` (MCP 2026-07-28).

    class Calculator:
        @tool
        async def add(self, a: int, b: int) -> int:
            "Add two integers."
            return a + b

A plugin with `@tool` methods provides one MCP server per ACP session: the host
adds `{"type": "acp", "name", "serverId"}` to every session setup request that
passes toward the agent, and answers the agent's `mcp/message` requests for
those servers here. The binding is stateless: every inner request carries its
protocol version and client capabilities in `params._meta`, so nothing is kept
between requests but the table of requests still running.
"""

from __future__ import annotations

import inspect
import itertools
import secrets
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import orjson

from . import protocol
from .mcp_schema import input_schema

if TYPE_CHECKING:
    from .call import Call, Context


class ToolHost(Protocol):
    """What the tool server needs from the plugin host it serves in."""

    plugin: Any
    name: str

    def release(self, call: Call) -> None: ...

    def cancel_call(self, call: Call) -> None: ...

    def report_failure(self, where: str, exc: BaseException) -> None: ...

    def own_notification(self, to: str, method: str, params: Any) -> None: ...


__all__ = [
    "MCP_PROTOCOL_VERSION",
    "SETUP_METHODS",
    "McpToolServer",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "tool",
]

MCP_PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = [MCP_PROTOCOL_VERSION]
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SETUP_METHODS = protocol.SESSION_SETUP
MAX_ACTIVE_REQUESTS = 64  # per server; more at once is answered -33000

# Outer (ACP binding) error codes, as the MCP-over-ACP binding publishes them.
INVALID_PARAMS = protocol.INVALID_PARAMS
TOO_MANY_REQUESTS = protocol.TOO_MANY_MCP_REQUESTS
UNKNOWN_SERVER = protocol.UNKNOWN_MCP_SERVER
HANDLER_FAILED = protocol.MCP_HANDLER_FAILED
# Inner (MCP) error codes.
METHOD_NOT_FOUND = protocol.METHOD_NOT_FOUND
UNSUPPORTED_VERSION = -32022

_TOOL_ATTRIBUTE = "__conductor_tool__"


class ToolError(Exception):
    """Raise in a tool to report a failure to the agent (`isError: true`) in your own words."""


@attrs.frozen
class ToolResult:
    """Full control over a tool's result: content blocks, structured value, error flag."""

    content: list[dict[str, Any]] = attrs.field(factory=list)
    structured: Any = None
    is_error: bool = False


@attrs.frozen
class _ToolSpec:
    name: str | None
    title: str | None
    description: str | None
    input_schema: dict[str, Any] | None


@attrs.frozen
class _Tool:
    """A bound tool: its MCP definition and how to call it."""

    name: str
    definition: dict[str, Any]
    func: Callable[..., Awaitable[Any]]
    call_parameter: str | None  # the parameter that receives the ToolCall, if any
    parameters: frozenset[str]
    required: frozenset[str]
    accepts_any: bool  # it takes **kwargs: no argument is unknown


def tool(
    func: Callable[..., Awaitable[Any]] | None = None,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
) -> Any:
    """Mark an async method as an MCP tool (`@tool` or `@tool(name=..., description=...)`).

    The name defaults to the function's, the description to its docstring, the
    input schema to one derived from its signature. A parameter annotated
    `ToolCall` receives the call's context instead of an argument.
    """

    def mark(function: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        if not inspect.iscoroutinefunction(function):
            raise TypeError(f"@tool needs an async function; {function.__qualname__} is not")
        setattr(function, _TOOL_ATTRIBUTE, _ToolSpec(name, title, description, input_schema))
        return function

    return mark(func) if func is not None else mark


def tools_of(plugin: Any) -> list[_Tool]:
    """The plugin's `@tool` methods, bound to it (base classes first, overrides kept)."""
    specs: dict[str, _ToolSpec] = {}
    for klass in reversed(type(plugin).__mro__):
        for attribute, value in vars(klass).items():
            spec = getattr(value, _TOOL_ATTRIBUTE, None)
            if isinstance(spec, _ToolSpec):
                specs[attribute] = spec
            else:
                specs.pop(attribute, None)
    return [_bind(spec, getattr(plugin, attribute)) for attribute, spec in specs.items()]


def _bind(spec: _ToolSpec, method: Callable[..., Awaitable[Any]]) -> _Tool:
    hints = typing.get_type_hints(method)
    call_parameter = next((p for p, hint in hints.items() if hint is ToolCall), None)
    skip = {call_parameter} if call_parameter else set()
    schema = spec.input_schema or input_schema(method, skip)
    name = spec.name or method.__name__
    definition: dict[str, Any] = {"name": name}
    if spec.title:
        definition["title"] = spec.title
    description = spec.description or inspect.getdoc(method)
    if description:
        definition["description"] = description.strip()
    definition["inputSchema"] = schema
    signature = inspect.signature(method)
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    parameters = frozenset(p for p in signature.parameters if p not in skip)
    required = frozenset(
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in skip
    )
    return _Tool(name, definition, method, call_parameter, parameters, required, accepts_any)


class ToolCall:
    """What a tool may know about the call it serves: session, client, progress reporting."""

    def __init__(
        self,
        server: McpToolServer,
        call: Call,
        tool_name: str,
        arguments: dict[str, Any],
        session_id: str | None,
    ) -> None:
        self._server = server
        self._call = call
        self.tool = tool_name
        self.arguments = arguments
        self.session_id = session_id  # the ACP session the agent called the tool in
        inner = call.params.get("params") or {}
        meta: dict[str, Any] = inner["_meta"] if isinstance(inner.get("_meta"), dict) else {}
        self.client_info: dict[str, Any] | None = meta.get(META_CLIENT_INFO)
        self._progress_token = meta.get("progressToken")

    @property
    def ctx(self) -> Context:
        return self._call.ctx

    @property
    def state(self) -> dict[str, Any]:
        """The proxy's per-session state for this call's session."""
        return self._call.ctx.session(self.session_id)

    def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report progress to the caller (sent only if the caller asked for progress)."""
        if self._progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self._progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        self._server.notify(self._call, "notifications/progress", params)


class McpToolServer:
    """Serves one plugin's tools: declarations on session setup, `mcp/message` requests."""

    def __init__(self, host: ToolHost, tools: list[_Tool], name: str) -> None:
        self.host = host
        self.tools = {t.name: t for t in tools}
        self.name = name
        self.info = {"name": name, "version": "1"}
        self.instructions: str | None = getattr(host.plugin, "mcp_instructions", None)
        self.sessions: dict[str, str | None] = {}  # serverId -> ACP session id (once known)
        self._active: dict[tuple[str, Any], Call] = {}
        self._ids = itertools.count(1)
        self._token = secrets.token_hex(4)

    @classmethod
    def for_plugin(cls, host: ToolHost) -> McpToolServer | None:
        tools = tools_of(host.plugin)
        if not tools:
            return None
        name = getattr(host.plugin, "mcp_server_name", None) or host.name
        return cls(host, tools, str(name))

    # ------------------------------------------------------------ declarations

    def setup_hook(self, user_hook: Callable[[Call], Awaitable[Any]] | None) -> Any:
        """A session setup hook that declares a fresh server, then runs the plugin's own."""

        async def declare(call: Call) -> None:
            if call.source != "editor" or not isinstance(call.params, dict):
                if user_hook is not None:
                    await user_hook(call)
                return
            server_id = f"{self.name}-{self._token}-{next(self._ids)}"
            declaration = {"type": "acp", "name": self.name, "serverId": server_id}
            servers = call.params.get("mcpServers")
            if not isinstance(servers, list):
                servers = call.params["mcpServers"] = []
            servers.append(declaration)
            self.sessions[server_id] = call.session_id if call.method != "session/fork" else None
            if user_hook is not None:
                await user_hook(call)
            reply = call._reply if call.decided else await call.forward()
            result = reply.result if reply is not None and reply.ok else None
            if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                self.sessions[server_id] = result["sessionId"]

        return declare

    # ---------------------------------------------------------------- serving

    def message_hook(self, user_hook: Callable[[Call], Awaitable[Any]] | None) -> Any:
        """The `mcp/message` hook: this plugin's servers here, anything else to the plugin."""

        async def serve(call: Call) -> None:
            params = call.params if isinstance(call.params, dict) else {}
            server_id = params.get("serverId")
            if server_id not in self.sessions:
                if user_hook is not None:
                    await user_hook(call)
                elif call.is_request:
                    call.fail(
                        UNKNOWN_SERVER,
                        "MCP server registration unavailable",
                        {"serverId": server_id},
                    )
                return
            if not call.is_request:
                self._consumer_notification(params)
                return
            await self._serve_request(call, params)

        return serve

    async def _serve_request(self, call: Call, params: dict[str, Any]) -> None:
        key = (params["serverId"], params.get("requestId"))
        if not isinstance(key[1], str):
            call.fail(INVALID_PARAMS, "mcp/message needs a string requestId")
            return
        if key in self._active:
            call.fail(
                INVALID_PARAMS, f"requestId {key[1]!r} is already active", {"requestId": key[1]}
            )
            return
        if sum(1 for k in self._active if k[0] == key[0]) >= MAX_ACTIVE_REQUESTS:
            call.fail(
                TOO_MANY_REQUESTS,
                f"too many active MCP requests (limit {MAX_ACTIVE_REQUESTS})",
                {"limit": MAX_ACTIVE_REQUESTS},
            )
            return
        self._active[key] = call
        self.host.release(call)  # a tool may run long: traffic behind it goes on
        try:
            outcome = await self._outcome(call, params)
            orjson.dumps(outcome)  # a value JSON cannot carry is a handler failure too
        except Exception as exc:
            self.host.report_failure(f"MCP server {self.name!r}", exc)
            details = f"{type(exc).__name__}: {exc}"
            call.fail(HANDLER_FAILED, "MCP server handler failed", {"details": details})
            return
        finally:
            self._active.pop(key, None)
        call.respond(outcome)

    async def _outcome(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """The inner MCP outcome: `{"result": ...}` or `{"error": ...}`."""
        inner = params.get("params")
        inner = inner if isinstance(inner, dict) else {}
        problem = _envelope_problem(inner)
        if problem is not None:
            return {"error": problem}
        method = params.get("method")
        if method == "server/discover":
            return {"result": self._discover()}
        if method == "tools/list":
            tools = [t.definition for t in self.tools.values()]
            return {"result": _complete({"tools": tools, "ttlMs": 0, "cacheScope": "private"})}
        if method == "tools/call":
            return await self._call_tool(call, params["serverId"], inner)
        if method == "ping":
            return {"result": _complete({})}
        return {"error": {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": method}}

    def _discover(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": {"tools": {"listChanged": False}},
            "ttlMs": 0,
            "cacheScope": "private",
        }
        if self.instructions:
            result["instructions"] = self.instructions
        result["_meta"] = {META_SERVER_INFO: self.info}
        return _complete(result)

    async def _call_tool(self, call: Call, server_id: str, inner: dict[str, Any]) -> dict[str, Any]:
        name = inner.get("name")
        found = self.tools.get(name) if isinstance(name, str) else None
        if found is None:
            return {
                "error": {
                    "code": INVALID_PARAMS,
                    "message": f"Unknown tool: {name}",
                    "data": {"known": sorted(self.tools)},
                }
            }
        arguments = inner.get("arguments") or {}
        if not isinstance(arguments, dict):
            return _tool_error(f"arguments of {name} must be an object")
        missing = sorted(found.required - arguments.keys())
        unknown = [] if found.accepts_any else sorted(arguments.keys() - found.parameters)
        if missing or unknown:
            parts = [f"missing {', '.join(missing)}"] if missing else []
            parts += [f"unknown {', '.join(unknown)}"] if unknown else []
            return _tool_error(f"invalid arguments for {name}: {'; '.join(parts)}")
        kwargs = dict(arguments)
        if found.call_parameter is not None:
            session = self.sessions.get(server_id)
            kwargs[found.call_parameter] = ToolCall(self, call, found.name, arguments, session)
        try:
            value = await found.func(**kwargs)
        except ToolError as exc:
            return _tool_error(str(exc))
        except Exception as exc:
            self.host.report_failure(f"tool {name!r}", exc)
            return _tool_error(f"{name} failed: {type(exc).__name__}: {exc}")
        return {"result": _complete(_tool_result(value))}

    # ----------------------------------------------------- notifications

    def notify(self, call: Call, method: str, params: dict[str, Any]) -> None:
        """An inner notification for an active request, to whoever made it."""
        outer = call.params
        if (outer["serverId"], outer["requestId"]) not in self._active:
            return
        self.host.own_notification(
            call.source,
            "mcp/message",
            {
                "serverId": outer["serverId"],
                "requestId": outer["requestId"],
                "method": method,
                "params": params,
            },
        )

    def _consumer_notification(self, params: dict[str, Any]) -> None:
        """A consumer's `notifications/cancelled` stops the request it names."""
        if params.get("method") != "notifications/cancelled":
            return
        call = self._active.get((str(params.get("serverId")), params.get("requestId")))
        if call is not None:
            self.host.cancel_call(call)


def _envelope_problem(inner: dict[str, Any]) -> dict[str, Any] | None:
    """The inner error for a request whose `_meta` envelope is missing or unsupported."""
    meta = inner.get("_meta")
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    if not isinstance(version, str):
        return {
            "code": INVALID_PARAMS,
            "message": f"Invalid params: missing {META_VERSION} in params._meta",
        }
    if version not in SUPPORTED_VERSIONS:
        return {
            "code": UNSUPPORTED_VERSION,
            "message": "Unsupported protocol version",
            "data": {"supported": SUPPORTED_VERSIONS, "requested": version},
        }
    assert isinstance(meta, dict)
    if not isinstance(meta.get(META_CAPABILITIES), dict):
        return {
            "code": INVALID_PARAMS,
            "message": f"Invalid params: {META_CAPABILITIES} in params._meta must be an object",
        }
    return None


def _complete(result: dict[str, Any]) -> dict[str, Any]:
    result["resultType"] = "complete"
    return result


def _tool_error(text: str) -> dict[str, Any]:
    return {"result": _complete({"content": [{"type": "text", "text": text}], "isError": True})}


def _tool_result(value: Any) -> dict[str, Any]:
    """A tool's return value as a `tools/call` result."""
    if isinstance(value, ToolResult):
        result: dict[str, Any] = {"content": list(value.content), "isError": value.is_error}
        if value.structured is not None:
            result["structuredContent"] = value.structured
        return result
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    text = orjson.dumps(value).decode()
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result
