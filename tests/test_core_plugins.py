"""In-process proxy plugins (spec section 6, docs/writing-proxies.md), in memory: what a hook
may do, the order the host keeps around hooks that await, and bytes a hook did not change."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from memory import MemoryChain, settle

from conductor.plugin import Call, ProxyRequestError

# Spellings a parse into doubles and back would change, in fields no hook touches.
NUMBERS = (
    b'{"big":123456789012345678901234567890,"neg":-987654321098765432109876543210,'
    b'"half":1.50,"hundred":1E+2,"negzero":-0.0,"huge":1e400,"esc":"caf\\u00e9",'
    b'"lone":"\\ud800","arr":[1.50,1E+2,123456789012345678901234567890,-0.0]}'
)


def _chain(*components: Any, **kwargs: Any) -> MemoryChain:
    chain = MemoryChain(*components, **kwargs)
    chain.initialize()
    return chain


def _update(text: str, meta: bytes = b"{}") -> bytes:
    return (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
        b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%s},'
        b'"_meta":%s},"_meta":%s}}' % (json.dumps(text).encode(), meta, meta)
    )


def _texts(messages: list[Any]) -> list[str]:
    return [m["params"]["update"]["content"]["text"] for m in messages]


# ------------------------------------------------------------- inline hooks


class Prefix:
    """Inline (no await): prefixes every chunk, tags every prompt."""

    def on_session_update(self, call: Call) -> None:
        content = call.params["update"]["content"]
        content["text"] = "> " + content["text"]

    async def on_session_prompt(self, call: Call) -> None:
        call.params["prompt"].insert(0, {"type": "text", "text": "[tag]"})


def test_inline_hook_modifies_a_notification() -> None:
    chain = _chain(Prefix(), "agent")
    chain["agent"].send_raw(_update("hi"))
    assert _texts(chain.editor.take()) == ["> hi"]


def test_inline_async_hook_without_await_modifies_a_request() -> None:
    chain = _chain(Prefix(), "agent")
    chain.editor.request(
        5, "session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": "x"}]}
    )
    [prompt] = chain["agent"].take()
    assert [b["text"] for b in prompt["params"]["prompt"]] == ["[tag]", "x"]
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "end_turn"}}
    ]


class Answers:
    def on_vendor_local(self, call: Call) -> None:
        call.respond({"answeredBy": "plugin", "params": call.params})

    def on_vendor_refuse(self, call: Call) -> None:
        call.fail(-32001, "refused here", {"why": "policy"})

    def on_vendor_quiet(self, call: Call) -> None:
        call.drop()


def test_respond_answers_locally_and_nothing_goes_on() -> None:
    chain = _chain(Answers(), "agent")
    chain.editor.request("l", "_vendor/local", {"a": 1})
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": "l", "result": {"answeredBy": "plugin", "params": {"a": 1}}}
    ]
    assert chain["agent"].take() == []


def test_fail_answers_with_an_error_and_nothing_goes_on() -> None:
    chain = _chain(Answers(), "agent")
    chain.editor.request("r", "_vendor/refuse", {})
    assert chain.editor.take() == [
        {
            "jsonrpc": "2.0",
            "id": "r",
            "error": {"code": -32001, "message": "refused here", "data": {"why": "policy"}},
        }
    ]
    assert chain["agent"].take() == []


def test_drop_swallows_a_notification() -> None:
    chain = _chain(Answers(), "agent")
    chain.editor.notify("_vendor/quiet", {})
    chain["agent"].notify("_vendor/quiet", {})
    assert chain["agent"].take() == [] and chain.editor.take() == []


def test_a_plugin_answering_the_agents_request() -> None:
    class Allow:
        def on_session_request_permission(self, call: Call) -> None:
            call.respond({"outcome": {"outcome": "selected", "optionId": "allow"}})

    chain = _chain(Allow(), "agent")
    chain["agent"].request("ask", "session/request_permission", {"sessionId": "s"})
    assert chain.editor.take() == []
    assert chain["agent"].take() == [
        {
            "jsonrpc": "2.0",
            "id": "ask",
            "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
        }
    ]


def test_assigning_new_params_replaces_them() -> None:
    class Replace:
        def on_vendor_x(self, call: Call) -> None:
            call.params = {"replaced": True}

    chain = _chain(Replace(), "agent")
    chain.editor.request(1, "_vendor/x", {"original": 1})
    assert chain["agent"].take()[0]["params"] == {"replaced": True}


def test_a_hook_may_add_params_to_a_message_without_any() -> None:
    class Adds:
        def on_vendor_x(self, call: Call) -> None:
            call.params = {"added": True}

    chain = _chain(Adds(), "agent")
    chain.editor.notify("_vendor/x")
    assert chain["agent"].take() == [
        {"jsonrpc": "2.0", "method": "_vendor/x", "params": {"added": True}}
    ]


# --------------------------------------------------------------- raising hooks


class Boom:
    def on_vendor_boom(self, call: Call) -> None:
        raise ValueError("kaboom")

    async def on_vendor_slow_boom(self, call: Call) -> None:
        await trio.sleep(0)
        raise KeyError("late")

    def on_session_update(self, call: Call) -> None:
        call.params["update"]["content"]["text"] = "MUTATED"
        call.params["extra"] = 1
        raise RuntimeError("update hook failed")

    async def on_vendor_slow_note(self, call: Call) -> None:
        call.params["n"] = "MUTATED"
        await trio.sleep(0)
        raise RuntimeError("late")


def _assert_hook_error(answer: dict[str, Any], id: Any, hook: str, exception: str) -> None:
    assert answer["id"] == id
    error = answer["error"]
    assert error["code"] == -32603
    assert "boomer" in error["message"] and hook in error["message"]
    assert exception in error["message"]
    assert error["data"]["proxy"] == "boomer"
    assert error["data"]["hook"] == hook
    assert error["data"]["exception"] == exception


def _boomer() -> Boom:
    plugin = Boom()
    plugin.name = "boomer"  # type: ignore[attr-defined]
    return plugin


def test_a_raising_request_hook_answers_minus_32603_naming_proxy_hook_and_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chain = _chain(_boomer(), "agent")
    chain.editor.request(5, "_vendor/boom", {})
    [answer] = chain.editor.take()
    _assert_hook_error(answer, 5, "on_vendor_boom", "ValueError")
    assert "kaboom" in answer["error"]["message"]
    assert chain["agent"].take() == []
    assert "Traceback" in caplog.text


def test_a_raising_notification_hook_lets_it_go_on_as_it_arrived() -> None:
    chain = _chain(_boomer(), "agent")
    line = _update("hi", NUMBERS)
    chain["agent"].send_raw(line)
    assert chain.editor.take_raw() == [line], "not half modified: the exact original"


async def test_a_raising_awaiting_request_hook_answers_minus_32603(nursery: trio.Nursery) -> None:
    chain = _chain(_boomer(), "agent", nursery=nursery)
    chain.editor.request("b", "_vendor/slow_boom", {})
    await settle()
    [answer] = chain.editor.take()
    _assert_hook_error(answer, "b", "on_vendor_slow_boom", "KeyError")


async def test_a_raising_awaiting_notification_hook_lets_it_go_on_as_it_arrived(
    nursery: trio.Nursery,
) -> None:
    chain = _chain(_boomer(), "agent", nursery=nursery)
    line = b'{"jsonrpc":"2.0","method":"_vendor/slow_note","params":{"n":1.50,"m":1E+2}}'
    chain.editor.send_raw(line)
    await settle()
    assert chain["agent"].take_raw() == [line]


def test_the_chain_goes_on_after_a_raising_hook() -> None:
    chain = _chain(_boomer(), "agent")
    chain.editor.request(5, "_vendor/boom", {})
    chain.editor.take()
    chain.editor.request(6, "_vendor/fine", {})
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 6, "result": {}}]


def test_params_made_unencodable_answer_a_request_with_an_error() -> None:
    class Breaks:
        def on_vendor_x(self, call: Call) -> None:
            call.params["bad"] = {1, 2}

    chain = _chain(Breaks(), "agent")
    chain.editor.request(1, "_vendor/x", {})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32603
    assert chain["agent"].take() == []


# ------------------------------------------------------- no hook: passed by


class OnlyPrompts:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_session_prompt(self, call: Call) -> None:
        self.seen.append(call.method)


def test_a_plugin_without_a_hook_is_passed_without_a_visit_and_bytes_untouched() -> None:
    plugin = OnlyPrompts()
    chain = _chain(plugin, "agent")
    line = b'{"jsonrpc":"2.0","method":"_vendor/n","params":' + NUMBERS + b"}"
    chain.editor.send_raw(line)
    chain["agent"].send_raw(_update("x", NUMBERS))
    assert chain["agent"].take_raw() == [line]
    assert chain.editor.take_raw() == [_update("x", NUMBERS)]
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":"r","method":"_vendor/r","params":' + NUMBERS + b"}"
    )
    [request] = chain["agent"].take_raw()
    assert request.endswith(b'"params":' + NUMBERS + b"}")
    our_id = json.loads(request)["id"]
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (our_id, NUMBERS))
    assert chain.editor.take_raw() == [b'{"jsonrpc":"2.0","id":"r","result":' + NUMBERS + b"}"]
    assert plugin.seen == []


def test_on_message_sees_everything_without_its_own_hook() -> None:
    seen: list[tuple[str, str]] = []

    class Watcher:
        def on_session_prompt(self, call: Call) -> None:
            seen.append(("prompt-hook", call.method))

        def on_message(self, call: Call) -> None:
            seen.append((call.source, call.method))

    chain = _chain(Watcher(), "agent")
    assert seen == [("editor", "initialize")]
    seen.clear()
    chain.editor.request(1, "session/prompt", {})
    chain.editor.notify("_vendor/a", {})
    chain["agent"].notify("session/update", {})
    chain["agent"].request(2, "session/request_permission", {})
    assert seen == [
        ("prompt-hook", "session/prompt"),
        ("editor", "_vendor/a"),
        ("agent", "session/update"),
        ("agent", "session/request_permission"),
    ]


def test_a_hook_that_changes_nothing_lets_the_exact_bytes_through() -> None:
    class Looks:
        def on_session_update(self, call: Call) -> None:
            call.params["update"]["content"]["text"] += ""  # the same value again

    chain = _chain(Looks(), "agent")
    line = _update("x", NUMBERS)
    chain["agent"].send_raw(line)
    assert chain.editor.take_raw() == [line]


# --------------------------------------------------- numbers a hook did not touch


def test_a_modified_notification_keeps_the_bytes_of_every_value_it_did_not_change() -> None:
    chain = _chain(Prefix(), "agent")
    chain["agent"].send_raw(_update("hi", NUMBERS))
    [line] = chain.editor.take_raw()
    assert json.loads(line)["params"]["update"]["content"]["text"] == "> hi"
    assert line.count(NUMBERS) == 2, line


def test_a_modified_request_keeps_the_bytes_of_every_value_it_did_not_change() -> None:
    chain = _chain(Prefix(), "agent")
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"s",'
        b'"prompt":[{"type":"text","text":"hi","_meta":%s}],"_meta":%s}}' % (NUMBERS, NUMBERS)
    )
    [line] = chain["agent"].take_raw()
    prompt = json.loads(line)["params"]["prompt"]
    assert [b["text"] for b in prompt] == ["[tag]", "hi"]
    assert line.count(NUMBERS) == 2, line


class ModifiesReply:
    async def on_session_prompt(self, call: Call) -> None:
        reply = await call.forward()
        assert reply is not None and reply.result is not None
        reply.result["stopReason"] = "modified"


async def test_a_modified_reply_keeps_the_bytes_of_every_value_it_did_not_change(
    nursery: trio.Nursery,
) -> None:
    chain = _chain(ModifiesReply(), "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {})
    await settle()
    [prompt] = chain["agent"].take()
    chain["agent"].send_raw(
        b'{"jsonrpc":"2.0","id":%d,"result":{"stopReason":"end_turn","_meta":%s}}'
        % (prompt["id"], NUMBERS)
    )
    await settle()
    [line] = chain.editor.take_raw()
    assert json.loads(line)["result"]["stopReason"] == "modified"
    assert NUMBERS in line, line


async def test_an_awaited_reply_left_unchanged_travels_as_its_exact_bytes(
    nursery: trio.Nursery,
) -> None:
    class Awaits:
        async def on_session_prompt(self, call: Call) -> None:
            await call.forward()

    chain = _chain(Awaits(), "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {})
    await settle()
    [prompt] = chain["agent"].take()
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (prompt["id"], NUMBERS))
    await settle()
    assert chain.editor.take_raw() == [b'{"jsonrpc":"2.0","id":5,"result":' + NUMBERS + b"}"]


async def test_an_awaiting_hook_that_modified_params_keeps_the_other_bytes(
    nursery: trio.Nursery,
) -> None:
    class SlowPrefix:
        async def on_session_update(self, call: Call) -> None:
            await trio.sleep(0)
            call.params["update"]["content"]["text"] += "!"

    chain = _chain(SlowPrefix(), "agent", nursery=nursery)
    chain["agent"].send_raw(_update("hi", NUMBERS))
    await settle()
    [line] = chain.editor.take_raw()
    assert json.loads(line)["params"]["update"]["content"]["text"] == "hi!"
    assert line.count(NUMBERS) == 2, line


# ------------------------------------------------------------ own messages


def test_an_inline_hooks_own_notifications_go_out_before_the_message_it_forwards() -> None:
    class Announces:
        def on_session_prompt(self, call: Call) -> None:
            call.ctx.notify_agent("_note/before", {"n": 1})
            call.ctx.notify_editor("_note/seen", {"n": 2})
            call.params["tagged"] = True

        def on_session_update(self, call: Call) -> None:
            call.ctx.notify_editor("_note/update", {})

    chain = _chain(Announces(), "agent")
    chain.editor.request(1, "session/prompt", {})
    assert [m["method"] for m in chain["agent"].take()] == ["_note/before", "session/prompt"]
    assert [m["method"] for m in chain.editor.take()] == ["_note/seen"]
    chain["agent"].notify("session/update", {})
    assert [m["method"] for m in chain.editor.take()] == ["_note/update", "session/update"]


def test_an_inline_hooks_notifications_go_out_even_when_it_answers() -> None:
    class Announces:
        def on_vendor_x(self, call: Call) -> None:
            call.ctx.notify_editor("_note/first", {})
            call.respond({})

    chain = _chain(Announces(), "agent")
    chain.editor.request(1, "_vendor/x", {})
    assert [m.get("method") for m in chain.editor.take()] == ["_note/first", None]


async def test_own_request_to_the_agent_returns_its_result(nursery: trio.Nursery) -> None:
    class Asks:
        async def on_session_prompt(self, call: Call) -> None:
            echo = await call.ctx.request_agent("_demo/echo", {"from": "plugin"})
            call.params["echo"] = echo

    chain = _chain(Asks(), "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {})
    await settle()
    [ask] = chain["agent"].take()
    assert ask["method"] == "_demo/echo" and ask["params"] == {"from": "plugin"}
    chain["agent"].respond(ask["id"], {"ok": 1})
    await settle()
    [prompt] = chain["agent"].take()
    assert prompt["method"] == "session/prompt" and prompt["params"] == {"echo": {"ok": 1}}


async def test_own_request_error_raises_proxy_request_error(nursery: trio.Nursery) -> None:
    caught: list[ProxyRequestError] = []

    class Asks:
        async def on_vendor_x(self, call: Call) -> None:
            try:
                await call.ctx.request_editor("_vendor/ask", {})
            except ProxyRequestError as exc:
                caught.append(exc)
                call.respond({"asked": "failed"})

    chain = _chain(Asks(), "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/x", {})
    await settle()
    [ask] = chain.editor.take()
    chain.editor.fail(ask["id"], -32000, "no")
    await settle()
    assert [e.code for e in caught] == [-32000]
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"asked": "failed"}}]


async def test_own_request_replies_bypass_the_queue_of_the_side_the_hook_holds(
    nursery: trio.Nursery,
) -> None:
    """A hook for an agent update asks the agent: the reply comes from the side the hook
    holds, and must reach it anyway."""

    class Consults:
        async def on_session_update(self, call: Call) -> None:
            echo = await call.ctx.request_agent("_demo/echo", {})
            call.params["n"] = echo["n"]

    chain = _chain(Consults(), "agent", nursery=nursery)
    chain["agent"].notify("session/update", {"n": 0})
    chain["agent"].notify("session/update", {"n": 0})
    await settle()
    [ask] = chain["agent"].take()
    chain["agent"].respond(ask["id"], {"n": 1})
    await settle()
    [ask] = chain["agent"].take()
    chain["agent"].respond(ask["id"], {"n": 2})
    await settle()
    assert [m["params"]["n"] for m in chain.editor.take()] == [1, 2]


async def test_own_request_to_the_editor_from_an_editor_side_hook(nursery: trio.Nursery) -> None:
    class Consults:
        async def on_session_prompt(self, call: Call) -> None:
            answer = await call.ctx.request_editor("_test/consult", {"q": "ok?"})
            call.params["a"] = answer["a"]

    chain = _chain(Consults(), "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {})
    await settle()
    [ask] = chain.editor.take()
    chain.editor.respond(ask["id"], {"a": "yes"})
    await settle()
    assert chain["agent"].take()[0]["params"] == {"a": "yes"}


# -------------------------------------------------------------- awaiting hooks


async def test_await_forward_returns_the_reply_and_a_modified_reply_goes_back(
    nursery: trio.Nursery,
) -> None:
    chain = _chain(ModifiesReply(), "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {"sessionId": "s"})
    await settle()
    [prompt] = chain["agent"].take()
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    await settle()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "modified"}}
    ]


async def test_a_hook_may_modify_an_error_reply(nursery: trio.Nursery) -> None:
    class Softens:
        async def on_vendor_x(self, call: Call) -> None:
            reply = await call.forward()
            assert reply is not None and reply.error is not None
            reply.error["message"] = "softened"

    chain = _chain(Softens(), "agent", nursery=nursery)
    chain.editor.request(5, "_vendor/x", {})
    await settle()
    [request] = chain["agent"].take()
    chain["agent"].fail(request["id"], -32000, "harsh")
    await settle()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": 5, "error": {"code": -32000, "message": "softened"}}
    ]


async def test_forward_of_a_notification_returns_none(nursery: trio.Nursery) -> None:
    got: list[Any] = []

    class Forwards:
        async def on_vendor_n(self, call: Call) -> None:
            got.append(await call.forward())

    chain = _chain(Forwards(), "agent", nursery=nursery)
    chain.editor.notify("_vendor/n", {"a": 1})
    await settle()
    assert got == [None]
    assert chain["agent"].take() == [{"jsonrpc": "2.0", "method": "_vendor/n", "params": {"a": 1}}]


class Gate:
    """Holds each `_vendor/gate` undecided until `open` is set."""

    def __init__(self) -> None:
        self.open = trio.Event()

    async def on_vendor_gate(self, call: Call) -> None:
        await self.open.wait()
        call.params["passed"] = True


async def test_traffic_from_the_same_side_waits_while_a_call_is_undecided(
    nursery: trio.Nursery,
) -> None:
    gate = Gate()
    chain = _chain(gate, "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/gate", {})
    chain.editor.notify("_vendor/after", {})
    chain.editor.request(2, "_vendor/after", {})
    await settle()
    assert chain["agent"].take() == []
    gate.open.set()
    await settle()
    got = chain["agent"].take()
    assert [(m["method"], m.get("params")) for m in got] == [
        ("_vendor/gate", {"passed": True}),
        ("_vendor/after", {}),
        ("_vendor/after", {}),
    ]


async def test_traffic_from_the_other_side_does_not_wait(nursery: trio.Nursery) -> None:
    gate = Gate()
    chain = _chain(gate, "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/gate", {})
    chain["agent"].notify("session/update", {"n": 1})
    await settle()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "method": "session/update", "params": {"n": 1}}
    ]
    gate.open.set()
    await settle()


async def test_a_reply_passing_back_waits_behind_what_the_plugin_holds_from_that_side(
    nursery: trio.Nursery,
) -> None:
    """An answer from the agent must not overtake an agent message a hook still holds."""

    class HoldsUpdates:
        def __init__(self) -> None:
            self.open = trio.Event()

        async def on_session_update(self, call: Call) -> None:
            await self.open.wait()

    plugin = HoldsUpdates()
    chain = _chain(plugin, "agent", nursery=nursery)
    chain.editor.request(5, "_vendor/no-hook", {})
    [request] = chain["agent"].take()
    chain["agent"].notify("session/update", {"n": 1})
    chain["agent"].respond(request["id"], {"done": True})
    await settle()
    assert chain.editor.take() == []
    plugin.open.set()
    await settle()
    got = chain.editor.take()
    assert [m.get("method") for m in got] == ["session/update", None]
    assert got[1] == {"jsonrpc": "2.0", "id": 5, "result": {"done": True}}


async def test_a_decided_call_lets_the_traffic_behind_it_go_on(nursery: trio.Nursery) -> None:
    class ForwardsThenWaits:
        def __init__(self) -> None:
            self.open = trio.Event()

        async def on_vendor_slow(self, call: Call) -> None:
            await call.forward()
            await self.open.wait()

    plugin = ForwardsThenWaits()
    chain = _chain(plugin, "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/slow", {})
    chain.editor.request(2, "_vendor/next", {})
    await settle()
    assert [m["method"] for m in chain["agent"].take()] == ["_vendor/slow", "_vendor/next"]
    plugin.open.set()
    await settle()


async def test_traffic_behind_a_reply_the_hook_holds_waits_until_the_hook_returns(
    nursery: trio.Nursery,
) -> None:
    class HoldsReply:
        def __init__(self) -> None:
            self.open = trio.Event()

        async def on_session_prompt(self, call: Call) -> None:
            reply = await call.forward()
            await self.open.wait()
            assert reply is not None
            reply.result["held"] = True

    plugin = HoldsReply()
    chain = _chain(plugin, "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {})
    await settle()
    [prompt] = chain["agent"].take()
    chain["agent"].notify("session/update", {"n": 1})
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    chain["agent"].notify("session/update", {"n": 2})
    await settle()
    assert [m["params"]["n"] for m in chain.editor.take()] == [1]
    plugin.open.set()
    await settle()
    got = chain.editor.take()
    assert got == [
        {"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "end_turn", "held": True}},
        {"jsonrpc": "2.0", "method": "session/update", "params": {"n": 2}},
    ]


async def test_updates_keep_their_order_behind_slow_hooks(nursery: trio.Nursery) -> None:
    class Slow:
        async def on_session_update(self, call: Call) -> None:
            for _ in range(call.params["n"] % 3):
                await trio.sleep(0)
            call.params["seen"] = True

    chain = _chain(Slow(), "proxy", Slow(), "agent", nursery=nursery)
    chain.editor.request(5, "session/prompt", {})
    chain.relay()
    [prompt] = chain["agent"].take()
    for n in range(30):
        chain["agent"].notify("session/update", {"n": n})
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    for _ in range(10):
        await settle()
        chain.relay()
    got = chain.editor.take()
    assert [m["params"]["n"] for m in got[:-1]] == list(range(30))
    assert all(m["params"]["seen"] for m in got[:-1])
    assert got[-1] == {"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "end_turn"}}


async def test_respond_after_awaiting(nursery: trio.Nursery) -> None:
    class Later:
        async def on_vendor_x(self, call: Call) -> None:
            await trio.sleep(0)
            call.respond({"later": True})

    chain = _chain(Later(), "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/x", {})
    await settle()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"later": True}}]
    assert chain["agent"].take() == []


async def test_drop_after_awaiting(nursery: trio.Nursery) -> None:
    class Later:
        async def on_vendor_n(self, call: Call) -> None:
            await trio.sleep(0)
            call.drop()

    chain = _chain(Later(), "agent", nursery=nursery)
    chain.editor.notify("_vendor/n", {})
    chain.editor.notify("_vendor/other", {})
    await settle()
    assert [m["method"] for m in chain["agent"].take()] == ["_vendor/other"]


# --------------------------------------------------------------- what hooks see


@pytest.mark.parametrize("version", [1, 2])
def test_hooks_see_the_protocol_version(version: int) -> None:
    seen: list[Any] = []

    class Looks:
        def on_vendor_x(self, call: Call) -> None:
            seen.append(call.ctx.protocol_version)

    chain = MemoryChain(Looks(), "agent")
    chain.initialize(version)
    chain.editor.notify("_vendor/x", {})
    assert seen == [version]


def test_hooks_see_the_pinned_protocol_version() -> None:
    seen: list[Any] = []

    class Looks:
        def on_vendor_x(self, call: Call) -> None:
            seen.append(call.ctx.protocol_version)

    chain = MemoryChain(Looks(), "agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 9})
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 2})
    chain.editor.take()
    chain.editor.notify("_vendor/x", {})
    assert seen == [2]


def test_a_call_knows_its_source_id_and_session_and_keeps_session_state() -> None:
    seen: list[tuple[Any, ...]] = []

    class Looks:
        def on_message(self, call: Call) -> None:
            call.state["n"] = call.state.get("n", 0) + 1
            seen.append(
                (call.source, call.method, call.id is None, call.session_id, call.state["n"])
            )

    chain = _chain(Looks(), "agent")
    seen.clear()  # the initialize
    chain.editor.request("e", "session/prompt", {"sessionId": "s1"})
    chain["agent"].notify("session/update", {"sessionId": "s1"})
    chain["agent"].notify("session/update", {"sessionId": "s2"})
    assert seen == [
        ("editor", "session/prompt", False, "s1", 1),
        ("agent", "session/update", True, "s1", 2),
        ("agent", "session/update", True, "s2", 1),
    ]


def test_a_calls_id_is_hop_local() -> None:
    ids: list[Any] = []

    class Looks:
        def on_vendor_x(self, call: Call) -> None:
            ids.append(call.id)

    chain = _chain(Looks(), "agent")
    chain.editor.request("editor-id", "_vendor/x", {})
    assert ids and ids[0] != "editor-id" and ids[0] is not None


async def test_on_start_runs_once_before_any_message(nursery: trio.Nursery) -> None:
    events: list[str] = []

    class Starts:
        async def on_start(self, ctx: Any) -> None:
            await trio.sleep(0)  # even one that takes its time
            events.append("start")

        def on_initialize(self, call: Call) -> None:
            events.append("initialize")

        def on_vendor_x(self, call: Call) -> None:
            events.append("message")

    chain = MemoryChain(Starts(), "agent", nursery=nursery)
    chain.editor.request("init", "initialize", {"protocolVersion": 1})
    await settle()
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    assert "result" in chain.editor.take_one()
    chain.editor.notify("_vendor/x", {})
    assert events == ["start", "initialize", "message"]


# ------------------------------------------------------------------ mixed chains


def test_plugins_and_byte_proxies_mixed_keep_order_and_changes() -> None:
    class Mark:
        def __init__(self, mark: str) -> None:
            self.mark = mark
            self.name = f"mark{mark}"

        def on_session_update(self, call: Call) -> None:
            call.params["marks"] = call.params.get("marks", "") + self.mark

        def on_session_prompt(self, call: Call) -> None:
            call.params["marks"] = call.params.get("marks", "") + self.mark

    chain = _chain(Mark("a"), "proxy", Mark("b"), "agent")
    chain.editor.request(1, "session/prompt", {})
    chain.relay()
    [prompt] = chain["agent"].take()
    assert prompt["params"] == {"marks": "ab"}
    chain["agent"].notify("session/update", {})
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    chain.relay()
    got = chain.editor.take()
    assert got == [
        {"jsonrpc": "2.0", "method": "session/update", "params": {"marks": "ba"}},
        {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}},
    ]


async def test_a_reply_does_not_wait_behind_traffic_from_the_other_side(
    nursery: trio.Nursery,
) -> None:
    gate = Gate()
    chain = _chain(gate, "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/first", {})
    [first] = chain["agent"].take()
    chain.editor.request(2, "_vendor/gate", {})  # holds the editor side
    await settle()
    chain["agent"].respond(first["id"], {"n": 1})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"n": 1}}]
    gate.open.set()
    await settle()


async def test_respond_after_forward_answers_with_the_hooks_answer_once(
    nursery: trio.Nursery,
) -> None:
    class Overrides:
        async def on_vendor_x(self, call: Call) -> None:
            await call.forward()
            call.respond({"overridden": True})

    chain = _chain(Overrides(), "agent", nursery=nursery)
    chain.editor.request(1, "_vendor/x", {})
    await settle()
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {"overridden": False})
    await settle()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"overridden": True}}]


def test_changing_one_array_element_keeps_the_bytes_of_the_others() -> None:
    class Bumps:
        def on_vendor_x(self, call: Call) -> None:
            call.params["arr"][1] = "changed"

    chain = _chain(Bumps(), "agent")
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","method":"_vendor/x","params":{"arr":[1.50,1E+2,'
        b'123456789012345678901234567890,-0.0],"n":1e400}}'
    )
    [line] = chain["agent"].take_raw()
    assert line == (
        b'{"jsonrpc":"2.0","method":"_vendor/x","params":{"arr":[1.50,"changed",'
        b'123456789012345678901234567890,-0.0],"n":1e400}}'
    )
