"""What a proxy hook is handed: the `Call` passing through, its `Reply`, and the `Context`.

These objects only talk to the plugin host through the small `Host` protocol
below, so the hook API, the MCP tool server and the host do not import each
other in a circle.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .protocol import AGENT, EDITOR, INTERNAL_ERROR, MCP_MESSAGE, other_side

__all__ = ["Call", "Context", "Host", "ProxyRequestError", "Reply"]


class Host(Protocol):
    """What a `Call` and a `Context` need from the plugin host running them."""

    mcp_listeners: dict[tuple[Any, Any], Callable[[dict[str, Any]], None]]

    async def forward_call(self, call: Call) -> Reply | None: ...

    def answer_call(self, call: Call, payload: dict[str, Any]) -> None: ...

    def release(self, call: Call) -> None: ...

    async def own_request(self, to: str, method: str, params: Any) -> Reply: ...

    def own_notification(self, to: str, method: str, params: Any) -> None: ...

    def start_soon(self, task: Callable[..., Awaitable[Any]], *args: Any) -> None: ...


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
    """One request or notification passing through a proxy, with what it may do to it.

    Modify `params` in place; answer with `respond`/`fail`; swallow a
    notification with `drop`; in an `async def` hook, `await forward()` sends
    it on now and returns the reply (which may be modified before the hook
    returns). A hook that does none of these forwards the call, as modified,
    when it returns.
    """

    __slots__ = (
        "_host",
        "_reply",
        "answer",
        "answered",
        "ctx",
        "decided",
        "dropped",
        "id",
        "method",
        "params",
        "source",
    )

    def __init__(
        self, host: Host, ctx: Context, source: str, method: str, params: Any, request_id: Any
    ) -> None:
        self._host = host
        self.ctx = ctx
        self.source = source  # EDITOR or AGENT: where it comes from
        self.method = method
        self.params = params
        self.id = request_id  # hop-local; None for a notification
        self.answered = False
        self.answer: dict[str, Any] | None = None  # {"result": ..} or {"error": ..} once answered
        self.decided = False  # forwarded, answered, dropped or released: traffic behind goes on
        self.dropped = False
        self._reply: Reply | None = None

    @property
    def is_request(self) -> bool:
        return self.id is not None

    @property
    def destination(self) -> str:
        return other_side(self.source)

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
        self._answer({"result": result})

    def fail(self, code: int, message: str, data: Any = None) -> None:
        """Answer the request with a JSON-RPC error; it goes no further."""
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._answer({"error": error})

    def _answer(self, payload: dict[str, Any]) -> None:
        if not self.is_request:
            raise ValueError("a notification cannot be answered")
        if self.answered:
            raise RuntimeError(f"{self!r} was already answered")
        self.answered = True
        self.answer = payload
        self._host.answer_call(self, payload)

    def drop(self) -> None:
        """Swallow a notification (a request must be answered instead)."""
        if self.is_request:
            raise ValueError("a request cannot be dropped; answer it with respond() or fail()")
        self.dropped = True
        self.decided = True

    def __repr__(self) -> str:
        kind = "request" if self.is_request else "notification"
        return f"<Call {kind} {self.method} from {self.source}>"


class Context:
    """What a proxy can do beyond the call at hand: its own messages, and session state."""

    def __init__(self, host: Host, name: str) -> None:
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
        """Send this proxy's own notification to `to` (EDITOR or AGENT)."""
        self._host.own_notification(to, method, params)

    def notify_agent(self, method: str, params: Any = None) -> None:
        self.notify(AGENT, method, params)

    def notify_editor(self, method: str, params: Any = None) -> None:
        self.notify(EDITOR, method, params)

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
            outcome = await self.request(to, MCP_MESSAGE, envelope)
        finally:
            self._host.mcp_listeners.pop(key, None)
        if not isinstance(outcome, dict) or not ("result" in outcome or "error" in outcome):
            raise ProxyRequestError(
                {"code": INTERNAL_ERROR, "message": f"malformed mcp/message outcome: {outcome!r}"}
            )
        return outcome
