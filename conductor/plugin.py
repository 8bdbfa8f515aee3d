"""The proxy plugin API: a proxy is a plain object with async hook methods.

    class Arrow:
        async def on_session_update(self, call: Call) -> None:
            if (text := chunk_text(call.params)) is not None:
                set_chunk_text(call.params, "> " + text)

A hook is named after the ACP method it sees (`session/prompt` ->
`on_session_prompt`, `_vendor/x` -> `on_vendor_x`); `on_message` sees every
request and notification that has no hook of its own. Whatever has no hook
passes through unchanged. Inside a hook, the `Call` can be modified in place,
forwarded and its reply awaited, answered locally, or dropped; `call.ctx`
sends the proxy's own requests and notifications to either side and keeps
per-session state. Methods marked `@tool` are offered to the agent as MCP
tools (see `mcp_tools`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import itertools
import re
import secrets
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .mcp_tools import ToolCall, ToolError, ToolResult, tool

if TYPE_CHECKING:
    from .plugin_host import PluginHost

__all__ = [
    "AGENT",
    "EDITOR",
    "Call",
    "Context",
    "PluginError",
    "ProxyRequestError",
    "Reply",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "hook_name",
    "load_factory",
    "tool",
]

EDITOR = "editor"  # the side toward the editor (upstream)
AGENT = "agent"  # the side toward the agent (downstream)
ENTRY_POINT_GROUP = "acp_conductor.proxies"

# Methods that travel from the agent toward the editor; everything else travels the other way
# (methods of unknown direction, such as extensions, are treated as both).
TOWARD_EDITOR = frozenset(
    {
        "session/update",
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/output",
        "terminal/release",
        "terminal/wait_for_exit",
        "terminal/kill",
        "session/elicitation",
        "mcp/message",
    }
)
TOWARD_AGENT = frozenset(
    {
        "initialize",
        "authenticate",
        "logout",
        "auth/login",
        "auth/logout",
        "session/new",
        "session/load",
        "session/list",
        "session/resume",
        "session/fork",
        "session/close",
        "session/delete",
        "session/prompt",
        "session/cancel",
        "session/set_mode",
        "session/set_model",
        "session/set_config_option",
    }
)


def hook_name(method: str) -> str:
    """The hook method name for an ACP method: `session/prompt` -> `on_session_prompt`."""
    return "on_" + re.sub(r"[^0-9A-Za-z]+", "_", method).strip("_")


class PluginError(Exception):
    """A plugin that cannot be loaded or that rejects its options (message is for the user)."""


class ProxyRequestError(Exception):
    """The proxy's own request was answered with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        self.code = error.get("code")
        super().__init__(f"{error.get('message', 'error')} ({self.code})")


class Reply:
    """The answer to a forwarded request: a result or an error, both modifiable."""

    __slots__ = ("_raw", "_snapshot", "error", "result")

    def __init__(self, result: Any = None, error: dict[str, Any] | None = None) -> None:
        self.result = result
        self.error = error
        self._raw: bytes | None = None  # the payload's bytes as it arrived...
        self._snapshot: bytes | None = None  # ...and what it looked like then

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_message(self) -> dict[str, Any]:
        return {"error": self.error} if self.error is not None else {"result": self.result}


class Call:
    """One request or notification passing through a proxy, with what it may do to it."""

    __slots__ = (
        "_decided",
        "_event",
        "_finished",
        "_host",
        "_raw",
        "_reply",
        "_snapshot",
        "answered",
        "ctx",
        "id",
        "method",
        "params",
        "source",
    )

    def __init__(
        self,
        host: PluginHost,
        source: str,
        method: str,
        params: Any,
        request_id: Any,
        raw: bytes | None,
    ) -> None:
        self._host = host
        self.ctx: Context = host.ctx
        self.source = source  # EDITOR or AGENT: where it comes from
        self.method = method
        self.params = params
        self.id = request_id  # hop-local; None for a notification
        self.answered = False
        self._decided = False
        self._raw = raw
        self._event: Any = None  # set by the host: wakes the dispatcher once decided
        self._finished: Any = None  # set by the host when the hook is over
        self._reply: Reply | None = None
        self._snapshot: bytes | None = None  # params as they arrived, to see if a hook changed them

    @property
    def is_request(self) -> bool:
        return self.id is not None

    @property
    def destination(self) -> str:
        return AGENT if self.source == EDITOR else EDITOR

    @property
    def session_id(self) -> str | None:
        params = self.params
        value = params.get("sessionId") if isinstance(params, dict) else None
        return value if isinstance(value, str) else None

    @property
    def state(self) -> dict[str, Any]:
        """Per-session state of this proxy (an empty dict for messages without a session)."""
        return self.ctx.session(self.session_id)

    async def forward(self) -> Reply | None:
        """Send it on now (as modified so far); for a request, wait for and return the reply.

        The reply is passed back when the hook returns, including any change the
        hook made to it, unless the hook answered the call itself.
        """
        return await self._host.forward_call(self)

    def respond(self, result: Any) -> None:
        """Answer the request here; it goes no further."""
        self._host.answer_call(self, {"result": result})

    def fail(self, code: int, message: str, data: Any = None) -> None:
        """Answer the request with a JSON-RPC error; it goes no further."""
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._host.answer_call(self, {"error": error})

    def drop(self) -> None:
        """Swallow a notification (a request must be answered instead)."""
        if self.is_request:
            raise ValueError("a request cannot be dropped; answer it with respond() or fail()")
        self._decided = True

    def __repr__(self) -> str:
        kind = "request" if self.is_request else "notification"
        return f"<Call {kind} {self.method} from {self.source}>"


class Context:
    """What a proxy can do beyond the call at hand: its own messages, and session state."""

    def __init__(self, host: PluginHost, name: str) -> None:
        self._host = host
        self.name = name
        self.protocol_version: int | None = None
        self._sessions: dict[str | None, dict[str, Any]] = {}
        self._mcp_ids = itertools.count(1)
        self._mcp_salt = secrets.token_hex(4)

    def session(self, session_id: str | None) -> dict[str, Any]:
        """Per-session state: a dict that lives as long as the chain."""
        return self._sessions.setdefault(session_id, {})

    async def request(self, to: str, method: str, params: Any = None) -> Any:
        """Send this proxy's own request to `to` (EDITOR or AGENT) and return its result."""
        reply = await self._host.own_request(to, method, params)
        if reply.error is not None:
            raise ProxyRequestError(reply.error)
        return reply.result

    async def request_agent(self, method: str, params: Any = None) -> Any:
        return await self.request(AGENT, method, params)

    async def request_editor(self, method: str, params: Any = None) -> Any:
        return await self.request(EDITOR, method, params)

    def notify(self, to: str, method: str, params: Any = None) -> None:
        self._host.own_notification(to, method, params)

    def start_soon(self, task: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a background task (a listener, a poller) for as long as the chain runs."""
        self._host.start_soon(task, *args)

    async def mcp_request(
        self,
        server_id: str,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
        to: str = EDITOR,
    ) -> dict[str, Any]:
        """Call an MCP-over-ACP server as a consumer: one `mcp/message` request.

        Returns the inner outcome, `{"result": ...}` or `{"error": ...}`; raises
        `ProxyRequestError` for an outer (binding) error. The provider's
        notifications for this request reach `on_notification` (inner method and
        params) in order, before the outcome. Cancelling the awaiting task sends
        `$/cancel_request`.
        """
        request_id = request_id or f"{self.name}:{next(self._mcp_ids)}:{self._mcp_salt}"
        envelope: dict[str, Any] = {
            "serverId": server_id,
            "requestId": request_id,
            "method": method,
        }
        if params is not None:
            envelope["params"] = params
        key = (server_id, request_id)
        if on_notification is not None:
            self._host.mcp_listeners[key] = on_notification
        try:
            outcome = await self.request(to, "mcp/message", envelope)
        finally:
            self._host.mcp_listeners.pop(key, None)
        if not isinstance(outcome, dict) or not ("result" in outcome or "error" in outcome):
            raise ProxyRequestError(
                {"code": -32603, "message": f"malformed mcp/message outcome: {outcome!r}"}
            )
        return outcome

    def notify_agent(self, method: str, params: Any = None) -> None:
        self.notify(AGENT, method, params)

    def notify_editor(self, method: str, params: Any = None) -> None:
        self.notify(EDITOR, method, params)


def load_factory(spec: str, search_path: Path | None = None) -> Callable[..., Any]:
    """Resolve `module:attr` or an entry-point name of the `acp_conductor.proxies` group."""
    if ":" not in spec:
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name == spec:
                try:
                    return entry.load()  # type: ignore[no-any-return]
                except Exception as exc:
                    raise PluginError(
                        f"plugin {spec!r} (entry point {entry.value}) cannot be loaded: {exc}"
                    ) from None
        known = sorted(e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        raise PluginError(
            f"no plugin named {spec!r}; give 'module:factory' or one of the installed names {known}"
        )
    module_name, _, attr = spec.partition(":")
    added = False
    if search_path is not None and str(search_path) not in sys.path:
        sys.path.insert(0, str(search_path))
        added = True
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(
            f"plugin {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        if added:
            sys.path.remove(str(search_path))
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise PluginError(f"plugin {spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(target):
        raise PluginError(f"plugin {spec!r}: {attr!r} is not callable")
    return target  # type: ignore[no-any-return]


def instantiate(spec: str, factory: Callable[..., Any], options: dict[str, Any]) -> Any:
    """Call the factory with the options; a refusal becomes a PluginError."""
    try:
        return factory(**options)
    except Exception as exc:
        raise PluginError(
            f"plugin {spec!r} rejected its options {options!r}: {type(exc).__name__}: {exc}"
        ) from None
