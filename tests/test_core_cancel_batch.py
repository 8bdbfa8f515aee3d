"""`$/cancel_request` hop by hop, and batches from the editor (spec section 4), in memory."""

from __future__ import annotations

import json
from typing import Any

import trio
from memory import MemoryChain, settle

from conductor.plugin import Call

CANCEL = "$/cancel_request"


def _chain(*components: Any, **kwargs: Any) -> MemoryChain:
    chain = MemoryChain(*components, **kwargs)
    chain.initialize()
    return chain


def _cancel(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": CANCEL, "params": {"requestId": request_id}}


# ------------------------------------------------------------------ cancellation


def test_cancel_reaches_the_agent_with_the_agents_id() -> None:
    chain = _chain("agent")
    chain.editor.request("p", "session/prompt", {"sessionId": "s"})
    [prompt] = chain["agent"].take()
    chain.editor.notify(CANCEL, {"requestId": "p"})
    assert chain["agent"].take() == [_cancel(prompt["id"])]


def test_cancel_is_translated_hop_by_hop_through_a_proxy() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request("p", "session/prompt", {"sessionId": "s"})
    [at_proxy] = chain["proxy"].received
    chain.relay()
    [at_agent] = chain["agent"].take()
    chain.editor.notify(CANCEL, {"requestId": "p"})
    # The proxy gets a cancel for the id the conductor gave it, never the editor's "p".
    [cancel] = chain["proxy"].received
    assert json.loads(cancel) == _cancel(json.loads(at_proxy)["id"])
    chain.relay()
    assert chain["agent"].take() == [_cancel(at_agent["id"])]


def test_cancelled_request_is_still_answered() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request("p", "session/prompt", {"sessionId": "s"})
    chain.relay()
    [prompt] = chain["agent"].take()
    chain.editor.notify(CANCEL, {"requestId": "p"})
    chain.relay()
    chain["agent"].take()
    chain["agent"].fail(prompt["id"], -32800, "Request cancelled")
    chain.relay()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": "p", "error": {"code": -32800, "message": "Request cancelled"}}
    ]


def test_cancel_for_an_id_the_next_hop_never_saw_is_not_forwarded() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.notify(CANCEL, {"requestId": 12345})
    chain.editor.notify(CANCEL, {"requestId": "init"})  # answered long ago
    assert chain["proxy"].take() == [] and chain["agent"].take() == []


def test_cancel_after_the_answer_is_not_forwarded() -> None:
    chain = _chain("agent")
    chain.editor.request(7, "_vendor/x", {})
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {})
    chain.editor.take()
    chain.editor.notify(CANCEL, {"requestId": 7})
    assert chain["agent"].take() == []


def test_cancel_with_an_invalid_request_id_is_dropped() -> None:
    chain = _chain("agent")
    chain.editor.request(7, "_vendor/x", {})
    chain["agent"].take()
    chain.editor.notify(CANCEL, {"requestId": {"id": 7}})
    chain.editor.notify(CANCEL, {})
    chain.editor.notify(CANCEL)
    assert chain["agent"].take() == [] and chain.editor.take() == []


def test_cancel_only_cancels_the_request_of_its_sender() -> None:
    """The agent's request 1 and the editor's request 1 are different requests."""
    chain = _chain("agent")
    chain.editor.request(1, "session/prompt", {})
    chain["agent"].request(1, "session/request_permission", {})
    [to_editor] = chain.editor.take()
    chain["agent"].take()
    chain["agent"].notify(CANCEL, {"requestId": 1})
    assert chain.editor.take() == [_cancel(to_editor["id"])]
    assert chain["agent"].take() == []


def test_agent_cancelling_its_request_reaches_the_editor_through_a_proxy() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].request("ask", "session/request_permission", {"sessionId": "s"})
    chain.relay()
    [request] = chain.editor.take()
    chain["agent"].notify(CANCEL, {"requestId": "ask"})
    [cancel] = chain["proxy"].received
    assert json.loads(cancel)["method"] == CANCEL, "cancels reach a proxy plain"
    chain.relay()
    assert chain.editor.take() == [_cancel(request["id"])]


def test_a_proxy_cancelling_its_own_wrapped_request() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].successor(30, "_vendor/long", {})
    [request] = chain["agent"].take()
    chain["proxy"].successor(None, CANCEL, {"requestId": 30})
    assert chain["agent"].take() == [_cancel(request["id"])]


def test_a_proxy_cancelling_its_own_request_to_the_editor() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].request(31, "_vendor/ask", {})
    [request] = chain.editor.take()
    chain["proxy"].notify(CANCEL, {"requestId": 31})
    assert chain.editor.take() == [_cancel(request["id"])]


# ------------------------------------------------------- cancels at a plugin


class Holds:
    """Holds every `_vendor/hold` in its hook until cancelled."""

    def __init__(self) -> None:
        self.cancelled = 0

    async def on_vendor_hold(self, call: Call) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled += 1
            raise


class ForwardsAndWaits:
    async def on_vendor_long(self, call: Call) -> None:
        await call.forward()


async def test_cancel_of_a_request_a_hook_holds_cancels_the_hook(nursery: trio.Nursery) -> None:
    plugin = Holds()
    chain = MemoryChain(plugin, "agent", nursery=nursery)
    chain.initialize()
    chain.editor.request("h", "_vendor/hold", {})
    await settle()
    assert chain.editor.take() == [] and chain["agent"].take() == []
    chain.editor.notify(CANCEL, {"requestId": "h"})
    await settle()
    assert plugin.cancelled == 1
    [answer] = chain.editor.take()
    assert answer["id"] == "h" and answer["error"]["code"] == -32800
    assert chain["agent"].take() == []


async def test_cancel_of_a_forwarded_request_goes_on_with_the_plugins_id(
    nursery: trio.Nursery,
) -> None:
    chain = MemoryChain(ForwardsAndWaits(), "agent", nursery=nursery)
    chain.initialize()
    chain.editor.request("l", "_vendor/long", {})
    await settle()
    [request] = chain["agent"].take()
    chain.editor.notify(CANCEL, {"requestId": "l"})
    await settle()
    assert chain["agent"].take() == [_cancel(request["id"])]
    chain["agent"].fail(request["id"], -32800, "Request cancelled")
    await settle()
    [answer] = chain.editor.take()
    assert answer["id"] == "l" and answer["error"]["code"] == -32800


async def test_cancel_of_a_request_queued_behind_a_hook_answers_it_in_its_turn(
    nursery: trio.Nursery,
) -> None:
    class Gate:
        def __init__(self) -> None:
            self.open = trio.Event()

        async def on_vendor_first(self, call: Call) -> None:
            await self.open.wait()

    gate = Gate()
    chain = MemoryChain(gate, "agent", nursery=nursery)
    chain.initialize()
    chain.editor.request(1, "_vendor/first", {})
    chain.editor.request(2, "_vendor/second", {})
    await settle()
    chain.editor.notify(CANCEL, {"requestId": 2})
    gate.open.set()
    await settle()
    [first] = chain["agent"].take()
    assert first["method"] == "_vendor/first", "the cancelled request never goes on"
    [answer] = chain.editor.take()
    assert answer["id"] == 2 and answer["error"]["code"] == -32800


def test_cancel_passes_a_plugin_without_a_hook_for_the_request() -> None:
    class Unrelated:
        def on_vendor_other(self, call: Call) -> None:
            pass

    chain = _chain(Unrelated(), "agent")
    chain.editor.request("p", "session/prompt", {})
    [prompt] = chain["agent"].take()
    chain.editor.notify(CANCEL, {"requestId": "p"})
    assert chain["agent"].take() == [_cancel(prompt["id"])]


def test_cancel_passes_an_inline_hook_that_saw_the_request() -> None:
    class Tags:
        def on_session_prompt(self, call: Call) -> None:
            call.params["tagged"] = True

    chain = _chain(Tags(), "agent")
    chain.editor.request("p", "session/prompt", {})
    [prompt] = chain["agent"].take()
    assert prompt["params"] == {"tagged": True}
    chain.editor.notify(CANCEL, {"requestId": "p"})
    assert chain["agent"].take() == [_cancel(prompt["id"])]


# ----------------------------------------------------------------------- batches


def test_a_batch_gets_one_response_array_once_every_request_is_answered() -> None:
    chain = _chain("agent")
    chain.editor.send(
        [
            {"jsonrpc": "2.0", "id": "e1", "method": "_vendor/echo", "params": {"n": 1}},
            {"jsonrpc": "2.0", "method": "_vendor/note"},
            {"jsonrpc": "2.0", "id": "e2", "method": "_vendor/echo", "params": {"n": 2}},
        ]
    )
    got = chain["agent"].take()
    assert [m["method"] for m in got] == ["_vendor/echo", "_vendor/note", "_vendor/echo"]
    chain["agent"].respond(got[2]["id"], {"n": 2})
    assert chain.editor.take() == [], "no answer before the whole batch is answered"
    chain["agent"].respond(got[0]["id"], {"n": 1})
    [batch] = chain.editor.take()
    assert isinstance(batch, list)
    assert sorted(batch, key=lambda m: m["id"]) == [
        {"jsonrpc": "2.0", "id": "e1", "result": {"n": 1}},
        {"jsonrpc": "2.0", "id": "e2", "result": {"n": 2}},
    ]


def test_batch_answers_keep_their_bytes() -> None:
    chain = _chain("agent")
    chain.editor.send([{"jsonrpc": "2.0", "id": 1, "method": "_vendor/x"}])
    [request] = chain["agent"].take()
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":{"n":1.50}}' % request["id"])
    assert chain.editor.take_raw() == [b'[{"jsonrpc":"2.0","id":1,"result":{"n":1.50}}]']


def test_a_batch_through_a_proxy() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "_vendor/a"},
            {"jsonrpc": "2.0", "id": 2, "method": "_vendor/b"},
        ]
    )
    chain.relay()
    for request in chain["agent"].take():
        chain["agent"].respond(request["id"], {"m": request["method"]})
    chain.relay()
    [batch] = chain.editor.take()
    assert sorted((m["id"], m["result"]["m"]) for m in batch) == [
        (1, "_vendor/a"),
        (2, "_vendor/b"),
    ]


def test_an_all_notification_batch_gets_no_array() -> None:
    chain = _chain("agent")
    chain.editor.send(
        [{"jsonrpc": "2.0", "method": "_vendor/a"}, {"jsonrpc": "2.0", "method": "_vendor/b"}]
    )
    assert chain.editor.take() == []
    assert [m["method"] for m in chain["agent"].take()] == ["_vendor/a", "_vendor/b"]


def test_an_empty_batch_gets_a_single_invalid_request_with_id_null() -> None:
    chain = _chain("agent")
    chain.editor.send_raw(b"[]")
    assert chain.editor.take() == [
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Invalid Request", "data": "empty batch"},
        }
    ]
    chain.editor.send_raw(b" [ ] ")
    [answer] = chain.editor.take()
    assert answer["id"] is None and answer["error"]["code"] == -32600


def test_invalid_batch_entries_get_their_own_minus_32600() -> None:
    chain = _chain("agent")
    chain.editor.send(
        [
            5,
            {"jsonrpc": "2.0", "id": "ok", "method": "_vendor/x"},
            "str",
            {"jsonrpc": "2.0", "id": "bad", "method": 7},
            {"foo": 1},
        ]
    )
    [request] = chain["agent"].take()
    assert chain.editor.take() == []
    chain["agent"].respond(request["id"], {})
    [batch] = chain.editor.take()
    assert len(batch) == 5
    errors = [m for m in batch if "error" in m]
    assert len(errors) == 4 and all(m["error"]["code"] == -32600 for m in errors)
    assert sorted(str(m["id"]) for m in errors) == ["None", "None", "None", "bad"]
    assert {"jsonrpc": "2.0", "id": "ok", "result": {}} in batch


def test_a_batch_of_only_invalid_entries_is_answered_at_once() -> None:
    chain = _chain("agent")
    chain.editor.send([1, 2])
    [batch] = chain.editor.take()
    assert [m["error"]["code"] for m in batch] == [-32600, -32600]


def test_a_batch_entry_the_conductor_answers_lands_in_the_array() -> None:
    chain = _chain("agent")
    chain.editor.send(
        [
            {
                "jsonrpc": "2.0",
                "id": "m",
                "method": "mcp/message",
                "params": {"serverId": "nobody", "requestId": "r1", "method": "tools/list"},
            },
            {"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {"protocolVersion": 1}},
            {"jsonrpc": "2.0", "id": "x", "method": "_vendor/x"},
        ]
    )
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {})
    [batch] = chain.editor.take()
    by_id = {m["id"]: m for m in batch}
    assert by_id["m"]["error"]["code"] == -33001
    assert by_id["m"]["error"]["data"]["serverId"] == "nobody"
    assert by_id["i"]["error"]["data"] == "already initialized"
    assert by_id["x"]["result"] == {}


def test_a_batch_entry_a_plugin_answers_lands_in_the_array() -> None:
    class Local:
        def on_vendor_local(self, call: Call) -> None:
            call.respond({"here": True})

    chain = _chain(Local(), "agent")
    chain.editor.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "_vendor/local"},
            {"jsonrpc": "2.0", "id": 2, "method": "_vendor/far"},
        ]
    )
    [far] = chain["agent"].take()
    chain["agent"].respond(far["id"], {"here": False})
    [batch] = chain.editor.take()
    assert sorted((m["id"], m["result"]["here"]) for m in batch) == [(1, True), (2, False)]


def test_initialize_in_a_batch_is_answered_in_an_array() -> None:
    chain = MemoryChain("agent")
    chain.editor.send(
        [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}]
    )
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    assert chain.editor.take() == [[{"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}]]


def test_a_batch_of_refused_initializes_starts_nothing() -> None:
    chain = MemoryChain("agent")
    chain.editor.send(
        [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 0}}]
    )
    [batch] = chain.editor.take()
    assert batch[0]["error"]["code"] == -32600
    assert chain.starts == 0


def test_a_batch_of_answers_from_the_editor_reaches_each_asker() -> None:
    chain = _chain("agent")
    chain["agent"].request("a", "session/request_permission", {})
    chain["agent"].request("b", "fs/read_text_file", {})
    first, second = chain.editor.take()
    chain.editor.send(
        [
            {"jsonrpc": "2.0", "id": second["id"], "result": {"content": ""}},
            {"jsonrpc": "2.0", "id": first["id"], "result": {"outcome": {}}},
        ]
    )
    assert chain["agent"].take() == [
        {"jsonrpc": "2.0", "id": "b", "result": {"content": ""}},
        {"jsonrpc": "2.0", "id": "a", "result": {"outcome": {}}},
    ]
    assert chain.editor.take() == []


def test_a_batch_from_a_component_is_routed_entry_by_entry() -> None:
    chain = _chain("agent")
    chain["agent"].send(
        [
            {"jsonrpc": "2.0", "method": "session/update", "params": {"n": 1}},
            {"jsonrpc": "2.0", "method": "session/update", "params": {"n": 2}},
        ]
    )
    got = chain.editor.take()
    assert [m["params"]["n"] for m in got] == [1, 2]


def test_proxy_mode_the_parent_cancels_a_request_from_our_successor() -> None:
    chain = MemoryChain("only:proxy")
    chain.editor.request(1, "_proxy/initialize", {"protocolVersion": 1})
    chain.relay()
    [envelope] = chain.editor.take()
    chain.editor.respond(envelope["id"], {"protocolVersion": 1})
    chain.relay()
    chain.editor.take()
    chain.editor.request(7, "_proxy/successor", {"method": "session/request_permission"})
    [wrapped] = chain["only"].take()
    chain.editor.notify(CANCEL, {"requestId": 7})
    assert chain["only"].take() == [_cancel(wrapped["id"])]


async def test_a_batch_through_an_awaiting_hook_is_answered_in_one_array(
    nursery: trio.Nursery,
) -> None:
    class Forwards:
        async def on_vendor_x(self, call: Call) -> None:
            await trio.sleep(0)
            reply = await call.forward()
            assert reply is not None
            reply.result["seen"] = True

    chain = _chain(Forwards(), "agent", nursery=nursery)
    chain.editor.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "_vendor/x"},
            {"jsonrpc": "2.0", "id": 2, "method": "_vendor/y"},
        ]
    )
    await settle()
    for request in chain["agent"].take():
        chain["agent"].respond(request["id"], {"m": request["method"]})
    await settle()
    [batch] = chain.editor.take()
    assert sorted(batch, key=lambda m: m["id"]) == [
        {"jsonrpc": "2.0", "id": 1, "result": {"m": "_vendor/x", "seen": True}},
        {"jsonrpc": "2.0", "id": 2, "result": {"m": "_vendor/y"}},
    ]
