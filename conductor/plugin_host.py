"""Runs one plugin object as an in-process proxy node of the router.

The router offers the host every message that reaches the plugin's position.
The host passes on what the plugin has no hook for. A hook that cannot
suspend (a plain `def`, or an `async def` without `await`) is visited in
passing, right where the message is routed: no task, no id, and the original
bytes travel on when it changed nothing. A hook that may suspend runs as a
task; the host holds its call until the hook decides it (forwards, answers,
drops or releases it) and gives it back to the router then.

Ordering: messages from each side reach the plugin one at a time, in order.
While a call from a side is undecided, what comes after it from that side
(answers travelling through included) waits in that side's queue; a hook that
awaits the reply to its forwarded request holds the traffic from the reply's
side until it returns, since it sends the reply on when it does. Replies to
the plugin's own requests bypass the queues: the hook holding a queue may be
the one waiting for them.
"""

from __future__ import annotations

import collections
import dis
import inspect
import itertools
import logging
import re
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from . import wire
from .call import Call, Context, Reply
from .flow import Flow, Peer
from .links import Answer, Transit
from .mcp_tools import McpToolServer
from .protocol import (
    AGENT,
    CANCEL,
    EDITOR,
    INTERNAL_ERROR,
    MCP_MESSAGE,
    REQUEST_CANCELLED,
    SESSION_SETUP,
)

if TYPE_CHECKING:
    from .links import Link, RouterPort

log = logging.getLogger("conductor")

__all__ = ["PluginHost", "hook_name"]

Spawn = Callable[..., None]  # spawn(async_fn, *args): run a task soon, in the chain's nursery
CallSoon = Callable[..., None]  # call_soon(fn, *args): run fn soon in trio's context

_SUSPENDING = frozenset(
    dis.opmap[name]
    for name in (
        "GET_AWAITABLE",
        "GET_AITER",
        "GET_ANEXT",
        "BEFORE_ASYNC_WITH",
        "SEND",
        "YIELD_VALUE",
        "END_ASYNC_FOR",
    )
    if name in dis.opmap
)


def hook_name(method: str) -> str:
    """The hook method name for an ACP method: `session/prompt` -> `on_session_prompt`."""
    return "on_" + re.sub(r"[^0-9A-Za-z]+", "_", method).strip("_")


def cannot_suspend(func: Callable[..., Any]) -> bool:
    """Whether calling `func` runs to completion at once: a plain function, or a coroutine
    function whose code has no `await`, `async for` or `async with`."""
    target = getattr(func, "__func__", func)
    code = getattr(target, "__code__", None)
    if code is None:
        return False
    if not inspect.iscoroutinefunction(target):
        return not inspect.isasyncgenfunction(target)
    return not any(ins.opcode in _SUSPENDING for ins in dis.get_instructions(code))


class _Hook:
    __slots__ = ("coroutine", "func", "inline", "name")

    def __init__(self, func: Callable[[Call], Any]) -> None:
        self.func = func
        self.inline = cannot_suspend(func)
        target = getattr(func, "__func__", func)
        self.coroutine = inspect.iscoroutinefunction(target)  # an inline one is stepped once
        self.name = getattr(func, "__name__", "hook")


class _Side:
    """The traffic from one side: what waits behind the call that holds it."""

    __slots__ = ("busy", "queue")

    def __init__(self) -> None:
        self.busy = 0  # calls (or held replies) from this side not yet decided
        self.queue: collections.deque[Transit | Answer] = collections.deque()


class _Waiter:
    """A request the host sent: its reply goes to an awaiting hook."""

    __slots__ = ("event", "forwarded", "reply", "side")

    def __init__(self, side: str, forwarded: Call | None) -> None:
        self.side = side  # where the request went (so where its reply comes from)
        self.forwarded = forwarded  # the call whose hook awaits it (None: the plugin's own)
        self.event = trio.Event()
        self.reply: Reply | None = None


class PluginHost:
    """Dispatches one plugin's traffic; see the module docstring."""

    def __init__(
        self,
        plugin: Any,
        name: str,
        *,
        spawn: Spawn,
        call_soon: CallSoon,
        flow: Flow | None = None,
    ) -> None:
        self.plugin = plugin
        self.name = name
        self._spawn = spawn
        self._call_soon = call_soon
        self.flow = flow if flow is not None else Flow()
        self.peer = Peer(f"proxy {name}")
        self.peer.on_resume = self._on_flow_resume
        self.ctx = Context(self, name)
        self.router: RouterPort | None = None
        self.link: Link | None = None
        self._catch_all = getattr(plugin, "on_message", None)
        self._hooks: dict[str, Callable[[Call], Any]] = {
            attribute: getattr(plugin, attribute)
            for attribute in dir(type(plugin))
            if attribute.startswith("on_") and attribute not in ("on_message", "on_start")
        }
        self._by_method: dict[str, _Hook | None] = {}
        # MCP tools (`@tool` methods): declared in session setups, served on mcp/message.
        self.mcp = McpToolServer.for_plugin(self)
        self._sides = {EDITOR: _Side(), AGENT: _Side()}
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}  # our request id -> who waits for the reply
        self._transits: dict[Call, Transit] = {}  # calls held by hooks that may suspend
        self._held: dict[Transit, Call] = {}
        self._snapshots: dict[Call, bytes | None] = {}
        self._forwarded: dict[Call, int] = {}  # calls whose hook awaits our forwarded request
        self._holding: dict[Call, str] = {}  # undecided calls: the side each holds
        self._holds_reply: dict[Call, str] = {}  # hooks with a reply in hand: the side held
        self._scopes: dict[Call, trio.CancelScope] = {}
        self._cancelled: set[Transit] = set()  # queued requests cancelled before their turn
        self._inline: Call | None = None  # the call an inline hook is visiting right now
        self._outbox: list[tuple[str, str, Any]] = []  # ... and its own messages, sent after
        # (serverId, requestId) of the plugin's own open mcp/message requests -> listener
        self.mcp_listeners: dict[tuple[Any, Any], Callable[[dict[str, Any]], None]] = {}

    def attach(self, router: RouterPort, link: Link) -> None:
        self.router = router
        self.link = link

    def start(self) -> None:
        """Run the plugin's `on_start(ctx)`, if it has one, before it sees any message (call
        it before the router routes anything here: both sides wait until it is done)."""
        start = getattr(self.plugin, "on_start", None)
        if start is None:
            return
        for side in self._sides.values():
            side.busy += 1
        self._spawn(self._run_start, start)

    async def _run_start(self, start: Callable[[Context], Awaitable[Any]]) -> None:
        try:
            await self._guarded(start, "on_start", self.ctx)
        finally:
            for name, side in self._sides.items():
                side.busy -= 1
                self._drain(name)

    async def _guarded(self, func: Callable[..., Awaitable[Any]], where: str, *args: Any) -> None:
        try:
            await func(*args)
        except Exception as exc:
            self.report_failure(where, exc)

    # ------------------------------------------------------------------ hooks

    def _hook_for(self, method: str) -> _Hook | None:
        try:
            return self._by_method[method]
        except KeyError:
            pass
        func = self._hooks.get(hook_name(method)) or self._catch_all
        if method == CANCEL:
            func = None
        elif self.mcp is not None and method in SESSION_SETUP:
            func = self.mcp.setup_hook(func)
        elif self.mcp is not None and method == MCP_MESSAGE:
            func = self.mcp.message_hook(func)
        hook = None if func is None else _Hook(func)
        self._by_method[method] = hook
        return hook

    # ------------------------------------------------------- the router's side

    def busy(self, side: str) -> bool:
        """Whether something from `side` is still waiting here (order must hold behind it)."""
        s = self._sides[side]
        return s.busy > 0 or bool(s.queue)

    def visits(self, side: str, t: Transit) -> bool:
        """Whether `offer` would do more than pass `t` on (for traces)."""
        return self.busy(side) or self._hook_for(t.method) is not None

    def offer(self, side: str, t: Transit) -> bool:
        """`t` reached the plugin from `side`: True to let the router walk it on, False when
        the host has taken it (answered, dropped, queued, or being served by a task)."""
        if self.mcp_listeners and t.method == MCP_MESSAGE and t.raw_id is None:
            params = t.params
            if type(params) is dict:
                listener = self.mcp_listeners.get((params.get("serverId"), params.get("requestId")))
                if listener is not None:
                    # A provider's notification for the plugin's own open MCP request: it
                    # must reach the plugin before the reply does, which bypasses the queue.
                    listener(params)
                    return False
        s = self._sides[side]
        if s.busy or s.queue:
            self._defer(side, t)
            return False
        hook = self._hook_for(t.method)
        if hook is None:
            return True
        return self._serve(side, t, hook)

    def defer_answer(self, side: str, answer: Answer) -> None:
        """An answer passing through while `side` is busy: it waits its turn."""
        self._sides[side].queue.append(answer)
        self.flow.wrote(self.peer, answer.size)

    def answered(self, answer: Answer) -> None:
        """The reply to a request the host sent."""
        waiter = self._waiting.pop(answer.transit.key, None)
        if waiter is None:
            # A reply to a request whose hook is gone (cancelled): nobody waits for it.
            log.debug("proxy %r got a reply to a request nobody awaits any more", self.name)
            return
        if waiter.forwarded is None:
            self._wake(waiter, self._reply_of(answer))
            return
        s = self._sides[waiter.side]
        if s.busy or s.queue:
            s.queue.append(answer)  # what came before it from that side goes first
            self.flow.wrote(self.peer, answer.size)
            self._waiting[answer.transit.key] = waiter
            return
        self._hand_reply(waiter, answer)

    def cancel(self, side: str, t: Transit | int) -> None:
        """The sender cancelled request `t`, which the host holds."""
        if not isinstance(t, Transit):
            return
        call = self._held.get(t)
        if call is None:
            if any(item is t for item in self._sides[side].queue):
                self._cancelled.add(t)
            return
        our_id = self._forwarded.get(call)
        if our_id is not None:
            self._send(call.destination, CANCEL, None, {"requestId": our_id})
            return
        scope = self._scopes.get(call)
        if scope is not None:
            scope.cancel()

    # ------------------------------------------------------------ serving

    def _defer(self, side: str, t: Transit) -> None:
        self._sides[side].queue.append(t)
        self.flow.wrote(self.peer, t.size)
        if t.raw_id is not None:
            assert self.router is not None and self.link is not None
            self.router.hold(t, self.link, side)

    def _serve(self, side: str, t: Transit, hook: _Hook) -> bool:
        request_id = next(self._ids) if t.raw_id is not None else None
        call = Call(self, self.ctx, side, t.method, t.params, request_id)
        if hook.inline:
            return self._visit(t, call, hook)
        self._sides[side].busy += 1
        self._holding[call] = side
        self._transits[call] = t
        self._held[t] = call
        self._snapshots[call] = t.snapshot()
        if t.raw_id is not None:
            assert self.router is not None and self.link is not None
            self.router.hold(t, self.link, side)
        self._spawn(self._run_hook, hook, call)
        return False

    def _visit(self, t: Transit, call: Call, hook: _Hook) -> bool:
        """Run a hook that cannot suspend, right here; True when `t` goes on."""
        snapshot = t.snapshot()
        self._inline = call
        try:
            result = hook.func(call)
            if hook.coroutine or inspect.iscoroutine(result):
                _run_to_completion(result, hook.name)
        except Exception as exc:
            self._send_outbox()
            self.report_failure(hook.name, exc)
            if t.raw_id is not None:
                self._answer(t, {"error": self._failure_error(hook.name, exc)})
                return False
            _restore(t)
            return True
        if self._outbox:
            self._send_outbox()
        else:
            self._inline = None
        if call.answered:
            assert call.answer is not None
            self._answer(t, call.answer)
            return False
        if call.dropped:
            return False
        return self._take_changes(t, call.params, snapshot, hook.name)

    def _take_changes(self, t: Transit, params: Any, snapshot: bytes | None, where: str) -> bool:
        """Record what a hook did to `t`'s params (`snapshot` is how they were before it);
        False if it made them unencodable."""
        if params is None and t.params is None:
            return True
        try:
            now = wire.dumps(params) if params is not None else None
        except TypeError as exc:
            self.report_failure(where, exc)
            if t.raw_id is not None:
                self._answer(t, {"error": self._failure_error(where, exc)})
                return False
            _restore(t)
            return True
        if now == snapshot:
            return True
        old = t.params_raw
        if old is None or params is None or old == snapshot:
            # Bytes that were canonical stay exact as the new canonical bytes: no walk needed.
            raw = now
        else:
            raw = wire.encode_preserving(old, wire.parse(old), params)
        t.change_params(params, raw, now)
        return True

    def _send_outbox(self) -> None:
        outbox = self._outbox[:]
        self._outbox.clear()
        self._inline = None
        for to, method, params in outbox:
            self._send(to, method, None, params)

    async def _run_hook(self, hook: _Hook, call: Call) -> None:
        t = self._transits[call]
        with trio.CancelScope() as scope:
            self._scopes[call] = scope
            try:
                await hook.func(call)
            except Exception as exc:
                self._hook_failed(hook.name, call, t, exc)
            finally:
                del self._scopes[call]
        try:
            if call.is_request and not call.answered:
                if scope.cancelled_caught:
                    self._answer(t, {"error": _cancelled_error()})
                elif call._reply is not None:
                    self._answer_with_reply(t, call._reply)
                elif call not in self._forwarded and not call.decided:
                    self._pass_on(call, t)
                elif call in self._forwarded:
                    # Forwarded and not awaited to the end (a cancelled or released hook):
                    # the reply goes straight to the sender.
                    pass
            elif not call.is_request and not call.decided:
                self._pass_on(call, t)
        finally:
            self._finish(call)

    def _finish(self, call: Call) -> None:
        """The hook is over: nothing of it holds any side any more."""
        t = self._transits.pop(call, None)
        if t is not None:
            self._held.pop(t, None)
        self._snapshots.pop(call, None)
        our_id = self._forwarded.pop(call, None)
        if our_id is not None:  # its reply, if it ever comes, has nobody to go to
            self._waiting.pop(our_id, None)
        call.decided = True
        self._decide_side(call)
        side = self._holds_reply.pop(call, None)
        if side is not None:
            self._sides[side].busy -= 1
            self._drain(side)

    def _hook_failed(self, where: str, call: Call, t: Transit, exc: Exception) -> None:
        self.report_failure(where, exc)
        if call.is_request:
            if not call.answered:
                call.answered = True
                self._answer(t, {"error": self._failure_error(where, exc)})
        elif not call.decided:
            # Nothing is lost: the notification goes on as it arrived.
            _restore(t)
            call.decided = True
            self._transits.pop(call, None)
            self._resume(t)
            self._decide_side(call)

    def _failure_error(self, where: str, exc: Exception) -> dict[str, Any]:
        return {
            "code": INTERNAL_ERROR,
            "message": f"proxy {self.name!r} failed in {where}: {type(exc).__name__}: {exc}",
            "data": {
                "proxy": self.name,
                "hook": where,
                "exception": type(exc).__name__,
                "detail": str(exc),
            },
        }

    def report_failure(self, where: str, exc: BaseException) -> None:
        """Log a plugin's exception with its traceback (stderr, never the wire)."""
        log.error(
            "proxy %r: %s raised %s: %s\n%s",
            self.name,
            where,
            type(exc).__name__,
            exc,
            "".join(traceback.format_exception(exc)),
        )

    # ----------------------------------------------------- deciding a call

    def _pass_on(self, call: Call, t: Transit) -> None:
        """The call goes on as the hook left it; its reply goes straight to the sender."""
        if self._take_changes(t, call.params, self._snapshots.get(call), "hook"):
            self._resume(t)
        call.decided = True
        self._transits.pop(call, None)
        self._held.pop(t, None)
        self._decide_side(call)

    def _resume(self, t: Transit) -> None:
        assert self.router is not None and self.link is not None
        own = self._begin()
        try:
            self.router.resume(self.link, t)
        finally:
            self._end(own)

    def _begin(self) -> bool:
        """Attribute what follows to this plugin for flow control, unless it happens within
        another source's burst (an inline visit), which it then belongs to."""
        if self.flow.current is not None:
            return False
        self.flow.begin(self.peer)
        return True

    def _end(self, own: bool) -> None:
        if own:
            self.flow.end(None)

    def _decide(self, call: Call) -> None:
        call.decided = True
        self._decide_side(call)

    def _decide_side(self, call: Call) -> None:
        """The call no longer holds its side: what waited behind it goes on."""
        side = self._holding.pop(call, None)
        if side is not None:
            self._sides[side].busy -= 1
            self._drain(side)

    def _drain(self, side: str) -> None:
        """Let what waited behind a decided call go on, in order, until something holds the
        side again (or flow control pauses the plugin)."""
        s = self._sides[side]
        if not s.queue or s.busy or self.peer.paused:
            return
        assert self.router is not None and self.link is not None
        router, link = self.router, self.link
        own = self._begin()
        try:
            while s.queue and not s.busy and not self.peer.paused:
                item = s.queue.popleft()
                if isinstance(item, Answer):
                    self.flow.sent(self.peer, item.size)
                    if item.transit.source is link:
                        waiter = self._waiting.pop(item.transit.key, None)
                        if waiter is not None:
                            self._hand_reply(waiter, item)
                    else:
                        router.resume_answer(link, item)
                    continue
                self.flow.sent(self.peer, item.size)
                if item in self._cancelled:
                    self._cancelled.discard(item)
                    self._answer(item, {"error": _cancelled_error()})
                    continue
                hook = self._hook_for(item.method)
                if hook is None or self._serve(side, item, hook):
                    router.resume(link, item)
        finally:
            self._end(own)

    def _on_flow_resume(self) -> None:
        self._call_soon(self._drain_all)

    def _drain_all(self) -> None:
        for side in (EDITOR, AGENT):
            self._drain(side)

    def _answer(self, t: Transit, payload: dict[str, Any], raw: bytes | None = None) -> None:
        assert self.router is not None and self.link is not None
        is_error = "error" in payload
        value = payload["error" if is_error else "result"]
        if raw is None:
            try:
                raw = wire.dumps(value)
            except TypeError as exc:
                self.report_failure("an answer", exc)
                is_error, value = True, self._failure_error("an answer", exc)
                raw = wire.dumps(value)
        self._held.pop(t, None)
        own = self._begin()
        try:
            self.router.answer(t, self.link, is_error, value, raw)
        finally:
            self._end(own)

    def _answer_with_reply(self, t: Transit, reply: Reply) -> None:
        """The hook awaited the reply to its forwarded call: it goes back, as modified."""
        payload = reply.as_message()
        raw = reply._raw
        if raw is not None:
            value = payload["error" if reply.error is not None else "result"]
            try:
                now = wire.dumps(value)
            except TypeError:
                now = None
            if now != reply._snapshot:
                raw = None if now is None else wire.encode_preserving(raw, wire.parse(raw), value)
        self._answer(t, payload, raw)

    # --------------------------------------------------- what hooks call

    async def forward_call(self, call: Call) -> Reply | None:
        if call.decided:
            raise RuntimeError(f"{call!r} was already forwarded or answered")
        t = self._transits.get(call)
        if t is None:
            raise RuntimeError(f"{call!r} cannot be forwarded from here")
        if not call.is_request:
            self._pass_on(call, t)
            return None
        snapshot = self._snapshots.get(call)
        if not self._take_changes(t, call.params, snapshot, "forward"):
            call.decided = True
            self._decide_side(call)
            return None
        our_id = next(self._ids)
        waiter = _Waiter(call.destination, call)
        self._waiting[our_id] = waiter
        self._forwarded[call] = our_id
        self._send(call.destination, call.method, our_id, t.params, t.params_raw)
        call.decided = True
        self._decide_side(call)
        await waiter.event.wait()
        call._reply = waiter.reply
        self._forwarded.pop(call, None)
        return waiter.reply

    def answer_call(self, call: Call, payload: dict[str, Any]) -> None:
        if call is self._inline:
            return  # read when the inline hook returns
        t = self._transits.get(call)
        if t is None:
            raise RuntimeError(f"{call!r} cannot be answered from here")
        self._answer(t, payload)
        if not call.decided:
            self._decide(call)

    def release(self, call: Call) -> None:
        """Let the traffic behind `call` go on although it is not answered yet."""
        if not call.decided:
            self._decide(call)

    def cancel_call(self, call: Call) -> None:
        """Cancel the hook serving `call` (it is answered -32800)."""
        scope = self._scopes.get(call)
        if scope is not None:
            scope.cancel()

    async def own_request(self, to: str, method: str, params: Any) -> Reply:
        our_id = next(self._ids)
        waiter = _Waiter(to, None)
        self._waiting[our_id] = waiter
        self._send(to, method, our_id, params)
        try:
            await waiter.event.wait()
        except trio.Cancelled:
            if self._waiting.pop(our_id, None) is not None:
                self._send(to, CANCEL, None, {"requestId": our_id})
            raise
        assert waiter.reply is not None
        return waiter.reply

    def own_notification(self, to: str, method: str, params: Any) -> None:
        if self._inline is not None:
            self._outbox.append((to, method, params))  # sent when the inline hook returns
            return
        self._send(to, method, None, params)

    def start_soon(self, task: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._spawn(self._guarded, task, getattr(task, "__name__", "task"), *args)

    # ---------------------------------------------------------- plumbing

    def _send(
        self, to: str, method: str, key: int | None, params: Any, raw: bytes | None = None
    ) -> None:
        assert self.router is not None and self.link is not None
        if raw is None and params is not None:
            raw = wire.dumps(params)
        own = self._begin()
        try:
            self.router.from_plugin(self.link, to, method, key, params, raw)
        finally:
            self._end(own)

    def _hand_reply(self, waiter: _Waiter, answer: Answer) -> None:
        """A forwarded call's reply reaches its hook, which holds the reply's side until it
        returns (it sends the reply on then)."""
        call = waiter.forwarded
        assert call is not None
        self._sides[waiter.side].busy += 1
        self._holds_reply[call] = waiter.side
        reply = self._reply_of(answer)
        reply._snapshot = wire.dumps(answer.payload)
        self._wake(waiter, reply)

    @staticmethod
    def _reply_of(answer: Answer) -> Reply:
        reply = Reply(None, answer.payload) if answer.is_error else Reply(answer.payload)
        reply._raw = answer.payload_raw
        return reply

    def _wake(self, waiter: _Waiter, reply: Reply) -> None:
        waiter.reply = reply
        self._call_soon(waiter.event.set)


def _run_to_completion(coro: Any, name: str) -> None:
    """Step a coroutine that cannot suspend; it finishes in one step."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError(f"{name} suspended, although it has no await")


def _restore(t: Transit) -> None:
    """Undo what a failed hook did to `t`'s params: they go on as they arrived."""
    raw = t.params_raw
    t.params = None if raw is None else wire.parse(raw)


def _cancelled_error() -> dict[str, Any]:
    return {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
