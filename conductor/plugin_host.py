"""Runs one plugin object as a proxy, whatever carries its messages.

The host is the proxy half of the protocol: it receives requests,
notifications and responses from the editor side or the agent side, calls the
plugin's hooks, forwards what goes on with ids of its own, and translates
cancellations. A transport (the in-process link of the router, or stdio for
`conductor proxy`) only moves message dicts; the host never encodes JSON.

Ordering: messages from each side are handled one at a time, in order; the
next one waits until the current hook has decided (forwarded, answered or
dropped) its call, not until the hook finishes, so a hook that awaits a reply
does not stall the traffic behind it.
"""

from __future__ import annotations

import itertools
import logging
import math
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
import trio

from .mcp_tools import SETUP_METHODS, McpToolServer
from .plugin import AGENT, EDITOR, TOWARD_AGENT, TOWARD_EDITOR, Call, Context, Reply, hook_name
from .wire import make_message

log = logging.getLogger("conductor")

CANCEL = "$/cancel_request"
_UNKNOWN = object()
QUEUE_HIGH_WATER = 4096  # messages waiting for a plugin before the conductor stops reading
REQUEST_CANCELLED = -32800
INTERNAL_ERROR = -32603

Hook = Callable[[Call], Awaitable[Any]]


class Transport(Protocol):
    def send(self, to: str, message: dict[str, Any], raw: bytes | None) -> None:
        """Deliver `message` toward side `to`. `raw` is the exact payload bytes (params,
        result or error) when the payload is unchanged, so it can travel as received."""


class _Pending:
    """One request the host sent: where its reply goes, or who awaits it."""

    __slots__ = ("finished", "origin", "origin_id", "waiter")

    def __init__(
        self,
        origin: str | None,
        origin_id: Any,
        waiter: trio.MemorySendChannel[Reply] | None,
        finished: trio.Event | None = None,
    ) -> None:
        self.origin = origin
        self.origin_id = origin_id
        self.waiter = waiter
        self.finished = finished  # the awaiting hook's end: traffic behind the reply waits for it


class PluginHost:
    """Dispatches one plugin's traffic; see the module docstring."""

    def __init__(self, plugin: Any, name: str, transport: Transport) -> None:
        self.plugin = plugin
        self.name = name
        self.transport = transport
        self.ctx = Context(self, name)
        self._hooks: dict[str, Hook] = {}
        self._catch_all: Hook | None = getattr(plugin, "on_message", None)
        for attribute in dir(type(plugin)):
            if attribute.startswith("on_") and attribute != "on_message":
                self._hooks[attribute] = getattr(plugin, attribute)
        self.hooks_toward_editor = (
            self._catch_all is not None
            or any(hook_name(m) in self._hooks for m in TOWARD_EDITOR)
            or any(self._unknown_direction(h) for h in self._hooks)
        )
        self.hooks_toward_agent = (
            self._catch_all is not None
            or any(hook_name(m) in self._hooks for m in TOWARD_AGENT)
            or any(self._unknown_direction(h) for h in self._hooks)
        )
        self._by_method: dict[str, Hook | None] = {}
        # MCP tools (`@tool` methods): declared in session setups, served on mcp/message.
        self.mcp = McpToolServer.for_plugin(self)
        if self.mcp is not None:
            self.hooks_toward_editor = self.hooks_toward_agent = True
        # No hooks at all: the router lets everything pass without a visit.
        self.inert = not self._hooks and self._catch_all is None and self.mcp is None
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._forwarded: dict[tuple[str, Any], int] = {}
        self._active: dict[tuple[str, Any], trio.CancelScope] = {}
        self._cancelled: set[tuple[str, Any]] = set()
        self._queues: dict[
            str, tuple[trio.MemorySendChannel[Any], trio.MemoryReceiveChannel[Any]]
        ] = {side: trio.open_memory_channel[Any](math.inf) for side in (EDITOR, AGENT)}
        self.queued = {EDITOR: 0, AGENT: 0}  # messages from each side not yet decided
        self._room = trio.Event()
        self._room.set()
        self._nursery: trio.Nursery | None = None
        # (serverId, requestId) of the plugin's own open mcp/message requests -> listener
        self.mcp_listeners: dict[tuple[Any, Any], Callable[[dict[str, Any]], None]] = {}

    @property
    def congested(self) -> bool:
        """Too much is waiting for this plugin: its sources should pause (back-pressure)."""
        return not self._room.is_set()

    async def wait_room(self) -> None:
        await self._room.wait()

    @staticmethod
    def _unknown_direction(attribute: str) -> bool:
        known = {hook_name(m) for m in TOWARD_AGENT | TOWARD_EDITOR}
        return attribute not in known and attribute not in ("on_start",)

    def hook_for(self, method: str) -> Hook | None:
        hook = self._by_method.get(method, _UNKNOWN)
        if hook is _UNKNOWN:
            hook = self._hooks.get(hook_name(method)) or self._catch_all
            if self.mcp is not None and method in SETUP_METHODS:
                hook = self.mcp.setup_hook(hook)
            elif self.mcp is not None and method == "mcp/message":
                hook = self.mcp.message_hook(hook)
            self._by_method[method] = hook
        return hook  # type: ignore[return-value]

    def wants(self, method: str) -> bool:
        """Whether a message with this method must go through the plugin at all."""
        return self.hook_for(method) is not None

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Serve until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            start = getattr(self.plugin, "on_start", None)
            if start is not None:
                await start(self.ctx)
            nursery.start_soon(self._pump, EDITOR)
            nursery.start_soon(self._pump, AGENT)

    def receive(self, source: str, message: dict[str, Any], raw: bytes | None = None) -> None:
        """Accept one message from side `source` (never blocks)."""
        method = message.get("method")
        if method == CANCEL:
            self._on_cancel(source, message.get("params"))
            return
        if self.mcp_listeners and method == "mcp/message" and "id" not in message:
            params = message.get("params")
            if isinstance(params, dict):
                listener = self.mcp_listeners.get((params.get("serverId"), params.get("requestId")))
                if listener is not None:
                    # A provider's notification for the plugin's own open MCP request: it
                    # must reach the plugin before the reply does, which bypasses the queue.
                    listener(params)
                    return
        if method is None:
            pending = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if pending is not None and pending.origin is None:
                # The reply to the plugin's own request: no ordering to keep, and a hook
                # holding its side's queue may be the one waiting for it.
                self._on_response(message, raw)
                return
        self.queued[source] += 1
        self._queues[source][0].send_nowait((message, raw))
        if self.queued[source] > QUEUE_HIGH_WATER and self._room.is_set():
            self._room = trio.Event()

    async def _pump(self, source: str) -> None:
        async for message, raw in self._queues[source][1]:
            try:
                await self._handle(source, message, raw)
            finally:
                self.queued[source] -= 1
                if not self._room.is_set() and max(self.queued.values()) <= QUEUE_HIGH_WATER // 2:
                    self._room.set()

    async def _handle(self, source: str, message: dict[str, Any], raw: bytes | None) -> None:
        method = message.get("method")
        if method is None:
            finished = self._on_response(message, raw)
            if finished is not None:
                # A hook awaits this reply and sends it on when it returns: what came
                # after the reply from this side must not overtake it.
                await finished.wait()
            return
        request_id = message.get("id")
        is_request = "id" in message
        if is_request and (source, request_id) in self._cancelled:
            self._cancelled.discard((source, request_id))
            self._send_response(source, request_id, {"error": _cancelled_error()}, None)
            return
        hook = self.hook_for(method)
        if hook is None:
            self._pass(source, message, raw)
            return
        call = Call(
            self, source, method, message.get("params"), request_id if is_request else None, raw
        )
        if raw is not None:
            call._snapshot = _snapshot(call.params)
        if not is_request:
            await self._notification_hook(hook, call)
            return
        call._finished = trio.Event()
        decided = trio.Event()
        assert self._nursery is not None
        self._nursery.start_soon(self._run_hook, hook, call, decided, is_request)
        await decided.wait()

    def _pass(self, source: str, message: dict[str, Any], raw: bytes | None) -> None:
        """Forward a message no hook looked at, payload bytes untouched."""
        to = AGENT if source == EDITOR else EDITOR
        if "id" in message:
            our_id = next(self._ids)
            self._pending[our_id] = _Pending(source, message["id"], None)
            self._forwarded[(source, message["id"])] = our_id
            out = {"jsonrpc": "2.0", "id": our_id, "method": message["method"]}
        else:
            out = {"jsonrpc": "2.0", "method": message["method"]}
        if message.get("params") is not None:
            out["params"] = message["params"]
        self.transport.send(to, out, raw)

    # -------------------------------------------------------------------- hooks

    async def _notification_hook(self, hook: Hook, call: Call) -> None:
        """Notifications are decided when their hook returns: run it right here."""
        try:
            await hook(call)
            if not call._decided:
                self._forward_notification(call)
        except Exception as exc:
            self._hook_failed(hook, call, exc)

    async def _run_hook(
        self, hook: Hook, call: Call, decided: trio.Event, is_request: bool
    ) -> None:
        key = (call.source, call.id)
        reply: Reply | None = None
        with trio.CancelScope() as scope:
            if is_request:
                self._active[key] = scope
            call._event = decided
            try:
                await hook(call)
                if not call._decided:
                    if is_request:
                        self._forward_request(call, None)
                    else:
                        self._forward_notification(call)
                reply = call._reply
            except Exception as exc:
                self._hook_failed(hook, call, exc)
            finally:
                self._active.pop(key, None)
                call._decided = True
                decided.set()
        try:
            if scope.cancelled_caught and is_request and not call.answered:
                call.answered = True
                self._send_response(call.source, call.id, {"error": _cancelled_error()}, None)
            elif reply is not None and not call.answered:
                call.answered = True
                raw = reply._raw if _unchanged(reply.as_message(), reply._snapshot) else None
                self._send_response(call.source, call.id, reply.as_message(), raw)
        finally:
            call._finished.set()

    def report_failure(self, where: str, exc: Exception) -> None:
        """Log a plugin's exception with its traceback (stderr, never the wire)."""
        log.error(
            "proxy %r: %s raised %s: %s\n%s",
            self.name,
            where,
            type(exc).__name__,
            exc,
            traceback.format_exc(),
        )

    def _hook_failed(self, hook: Hook, call: Call, exc: Exception) -> None:
        where = getattr(hook, "__name__", "hook")
        self.report_failure(where, exc)
        if call.is_request:
            if not call.answered:
                call.answered = True
                error = {
                    "code": INTERNAL_ERROR,
                    "message": f"proxy {self.name!r} failed in {where}: {type(exc).__name__}: {exc}",
                    "data": {
                        "proxy": self.name,
                        "hook": where,
                        "exception": type(exc).__name__,
                        "detail": str(exc),
                    },
                }
                self._send_response(call.source, call.id, {"error": error}, None)
        elif not call._decided:
            # Nothing is lost: the notification goes on as it arrived.
            self._forward_notification(call, call._raw)

    async def forward_call(self, call: Call) -> Reply | None:
        if call._decided:
            raise RuntimeError(f"{call!r} was already forwarded or answered")
        if not call.is_request:
            self._forward_notification(call)
            return None
        send, receive = trio.open_memory_channel[Reply](1)
        self._forward_request(call, send)
        reply = await receive.receive()
        call._reply = reply
        return reply

    def _forward_request(self, call: Call, waiter: trio.MemorySendChannel[Reply] | None) -> None:
        our_id = next(self._ids)
        self._pending[our_id] = _Pending(
            call.source, call.id, waiter, call._finished if waiter else None
        )
        self._forwarded[(call.source, call.id)] = our_id
        raw = self._kept_raw(call)
        self._decide(call)
        self.transport.send(call.destination, make_message(our_id, call.method, call.params), raw)

    def _forward_notification(self, call: Call, raw: bytes | None = None) -> None:
        raw = raw or self._kept_raw(call)
        self._decide(call)
        self.transport.send(call.destination, make_message(None, call.method, call.params), raw)

    @staticmethod
    def _kept_raw(call: Call) -> bytes | None:
        """The params' original bytes if the hook left them as they were (fidelity)."""
        return call._raw if _unchanged(call.params, call._snapshot) else None

    def answer_call(self, call: Call, payload: dict[str, Any]) -> None:
        if not call.is_request:
            raise ValueError("a notification cannot be answered")
        if call.answered:
            raise RuntimeError(f"{call!r} was already answered")
        call.answered = True
        self._decide(call)
        self._send_response(call.source, call.id, payload, None)

    def release(self, call: Call) -> None:
        """Let the traffic behind `call` go on although it is not answered yet."""
        self._decide(call)

    def cancel_call(self, call: Call) -> None:
        """Cancel the hook serving `call` (it is answered -32800)."""
        scope = self._active.get((call.source, call.id))
        if scope is not None:
            scope.cancel()

    @staticmethod
    def _decide(call: Call) -> None:
        call._decided = True
        if call._event is not None:
            call._event.set()

    # -------------------------------------------------------- own messages

    async def own_request(self, to: str, method: str, params: Any) -> Reply:
        our_id = next(self._ids)
        send, receive = trio.open_memory_channel[Reply](1)
        self._pending[our_id] = _Pending(None, None, send)
        self.transport.send(to, make_message(our_id, method, params), None)
        try:
            return await receive.receive()
        except trio.Cancelled:
            if self._pending.pop(our_id, None) is not None:
                self.transport.send(to, make_message(None, CANCEL, {"requestId": our_id}), None)
            raise

    def start_soon(self, task: Callable[..., Awaitable[Any]], *args: Any) -> None:
        if self._nursery is None:
            raise RuntimeError("background tasks can start once the proxy runs (on_start or later)")
        self._nursery.start_soon(task, *args)

    def own_notification(self, to: str, method: str, params: Any) -> None:
        self.transport.send(to, make_message(None, method, params), None)

    # ---------------------------------------------------- responses and cancels

    def _on_response(self, message: dict[str, Any], raw: bytes | None) -> trio.Event | None:
        pending = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if pending is None:
            log.warning("proxy %r got a response to an unknown id %r", self.name, message.get("id"))
            return None
        if pending.origin is not None:
            self._forwarded.pop((pending.origin, pending.origin_id), None)
        if pending.waiter is not None:
            reply = Reply(message.get("result"), message.get("error"))
            if raw is not None:
                reply._raw, reply._snapshot = raw, _snapshot(reply.as_message())
            pending.waiter.send_nowait(reply)
            return pending.finished
        assert pending.origin is not None
        payload = (
            {"error": message["error"]} if "error" in message else {"result": message.get("result")}
        )
        self._send_response(pending.origin, pending.origin_id, payload, raw)
        return None

    def _send_response(
        self, to: str, request_id: Any, payload: dict[str, Any], raw: bytes | None
    ) -> None:
        self.transport.send(to, {"jsonrpc": "2.0", "id": request_id, **payload}, raw)

    def _on_cancel(self, source: str, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        key = (source, request_id)
        our_id = self._forwarded.get(key)
        if our_id is not None:
            to = AGENT if source == EDITOR else EDITOR
            self.transport.send(to, make_message(None, CANCEL, {"requestId": our_id}), None)
        elif key in self._active:
            self._active[key].cancel()
        elif self.queued[source]:
            self._cancelled.add(key)

    def cancel_from_either_side(self, params: Any) -> None:
        """A plain `$/cancel_request` over stdio: the conductor sends cancels unwrapped, and the
        ids it gives us are unique across our two sides, so the request names its side."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        for side in (EDITOR, AGENT):
            key = (side, request_id)
            if key in self._forwarded or key in self._active:
                self._on_cancel(side, params)
                return
        for side in (EDITOR, AGENT):
            if self.queued[side]:
                self._cancelled.add((side, request_id))

    def fail_pending(self, error: dict[str, Any]) -> None:
        """The other side is gone: answer every request still waiting on it."""
        for our_id, pending in list(self._pending.items()):
            del self._pending[our_id]
            if pending.waiter is not None:
                pending.waiter.send_nowait(Reply(None, error))
            elif pending.origin is not None:
                self._send_response(pending.origin, pending.origin_id, {"error": error}, None)


def _cancelled_error() -> dict[str, Any]:
    return {"code": REQUEST_CANCELLED, "message": "Request cancelled"}


def _snapshot(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def _unchanged(value: Any, snapshot: bytes | None) -> bool:
    """Whether `value` still looks as it did when `snapshot` was taken."""
    return snapshot is not None and _snapshot(value) == snapshot
