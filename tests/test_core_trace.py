"""The router's observer (the `--trace` writer), in memory: one event per hop, requests and
responses paired by (from, to, id) on every hop, plugin hops included."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import trio
from memory import MemoryChain, settle

from conductor.plugin import Call


class Recorder:
    """An observer that keeps every event as a small dict."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.batch: int | None = None
        self.batches = 0

    def message(
        self, sender: str, receiver: str, request_id: Any, method: str, params: Any
    ) -> None:
        kind = "notification" if request_id is None else "request"
        self._add(kind=kind, frm=sender, to=receiver, id=request_id, method=method, params=params)

    def response(
        self,
        sender: str,
        receiver: str,
        request_id: Any,
        payload: Any,
        is_error: bool,
        session: str | None,
        protocol: str = "acp",
    ) -> None:
        self._add(
            kind="response",
            frm=sender,
            to=receiver,
            id=request_id,
            payload=payload,
            error=is_error,
            session=session,
            protocol=protocol,
        )

    def new_batch(self) -> None:
        self.batches += 1
        self.batch = self.batches

    def end_batch(self) -> None:
        self.batch = None

    def _add(self, **event: Any) -> None:
        event["batch"] = self.batch
        self.events.append(event)

    def shapes(self) -> list[str]:
        out = []
        for e in self.events:
            what = e.get("method") or ("error" if e["error"] else "result")
            out.append(f"{e['kind'][0]} {e['frm']}>{e['to']} {what}")
        return out

    def assert_paired(self) -> None:
        """Every response answers a request on the same hop, the other way, with its id."""
        opened = [(e["frm"], e["to"], e["id"]) for e in self.events if e["kind"] == "request"]
        for e in self.events:
            if e["kind"] == "response" and e["frm"] != "conductor":
                assert (e["to"], e["frm"], e["id"]) in opened, (e, opened)
        answered = [(e["to"], e["frm"], e["id"]) for e in self.events if e["kind"] == "response"]
        assert len(answered) == len(set(answered)), "one response per request on each hop"


def _traced(*components: Any, **kwargs: Any) -> tuple[MemoryChain, Recorder]:
    recorder = Recorder()
    chain = MemoryChain(*components, observer=recorder, **kwargs)
    return chain, recorder


def _initialize(chain: MemoryChain) -> None:
    chain.editor.request("init", "initialize", {"protocolVersion": 1})
    chain.relay()
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    chain.relay()
    assert chain.editor.take()[0]["result"] == {"protocolVersion": 1}


@pytest.mark.parametrize("proxies", [0, 1, 2])
def test_each_hop_is_traced_and_paired(proxies: int) -> None:
    names = [f"p{i}" for i in range(1, proxies + 1)]
    chain, recorder = _traced(*(f"{n}:proxy" for n in names), "agent")
    _initialize(chain)
    chain.editor.request(5, "session/prompt", {"sessionId": "sess-1"})
    chain.relay()
    [prompt] = chain["agent"].take()
    chain["agent"].notify("session/update", {"sessionId": "sess-1"})
    chain.relay()
    chain["agent"].request("ask", "session/request_permission", {"sessionId": "sess-1"})
    chain.relay()
    _update, ask = chain.editor.take()
    chain.editor.respond(ask["id"], {"outcome": {}})
    chain.relay()
    assert chain["agent"].take() == [{"jsonrpc": "2.0", "id": "ask", "result": {"outcome": {}}}]
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    chain.relay()
    assert chain.editor.take()[0]["id"] == 5

    path = ["editor", *names, "agent"]
    down = list(itertools.pairwise(path))
    up = [(b, a) for a, b in reversed(down)]

    def hops(kind: str, what: str, direction: list[tuple[str, str]]) -> list[str]:
        return [f"{kind} {a}>{b} {what}" for a, b in direction]

    expected = hops("r", "initialize", down) + hops("r", "result", up)
    expected += hops("r", "session/prompt", down)
    expected += hops("n", "session/update", up)
    expected += hops("r", "session/request_permission", up)
    expected += hops("r", "result", down)
    expected += hops("r", "result", up)
    assert recorder.shapes() == expected
    recorder.assert_paired()
    sessions = {e["session"] for e in recorder.events if e["kind"] == "response"}
    assert "sess-1" in sessions


def test_notifications_have_no_id() -> None:
    chain, recorder = _traced("agent")
    _initialize(chain)
    chain.editor.notify("_vendor/n", {"a": 1})
    [event] = [e for e in recorder.events if e.get("method") == "_vendor/n"]
    assert event["kind"] == "notification" and event["id"] is None
    assert event["params"] == {"a": 1}


def test_the_ids_in_a_trace_are_the_hop_ids_on_the_wire() -> None:
    chain, recorder = _traced("proxy", "agent")
    _initialize(chain)
    chain.editor.request("e", "_vendor/x", {})
    [at_proxy] = chain["proxy"].received
    chain.relay()
    [at_agent] = chain["agent"].take()
    requests = [e for e in recorder.events if e.get("method") == "_vendor/x"]
    assert [e["id"] for e in requests] == [json.loads(at_proxy)["id"], at_agent["id"]]


class Tags:
    def on_session_prompt(self, call: Call) -> None:
        call.params["tagged"] = True


class NoHooks:
    def on_vendor_unrelated(self, call: Call) -> None:
        pass


def test_a_plugin_that_sees_a_request_is_a_hop_of_its_own_with_the_answer_passing_back() -> None:
    chain, recorder = _traced(Tags(), "agent")
    _initialize(chain)
    recorder.events.clear()
    chain.editor.request(5, "session/prompt", {})
    [prompt] = chain["agent"].take()
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    assert recorder.shapes() == [
        "r editor>plugin1 session/prompt",
        "r plugin1>agent session/prompt",
        "r agent>plugin1 result",
        "r plugin1>editor result",
    ]
    recorder.assert_paired()


def test_a_plugin_without_a_hook_is_no_hop_and_the_answer_does_not_visit_it() -> None:
    chain, recorder = _traced(NoHooks(), "agent")
    _initialize(chain)
    recorder.events.clear()
    chain.editor.request(5, "session/prompt", {})
    [prompt] = chain["agent"].take()
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    assert recorder.shapes() == ["r editor>agent session/prompt", "r agent>editor result"]
    recorder.assert_paired()


def test_a_plugin_answering_itself_is_traced_as_the_answerer() -> None:
    class Local:
        def on_vendor_local(self, call: Call) -> None:
            call.respond({})

    chain, recorder = _traced(Local(), "agent")
    _initialize(chain)
    recorder.events.clear()
    chain.editor.request(5, "_vendor/local", {})
    assert recorder.shapes() == ["r editor>plugin1 _vendor/local", "r plugin1>editor result"]
    recorder.assert_paired()


async def test_awaiting_plugin_hops_pair_too(nursery: trio.Nursery) -> None:
    class Forwards:
        async def on_session_prompt(self, call: Call) -> None:
            reply = await call.forward()
            assert reply is not None

    chain, recorder = _traced(Forwards(), "proxy", "agent", nursery=nursery)
    _initialize(chain)
    chain.editor.request(5, "session/prompt", {})
    await settle()
    chain.relay()
    [prompt] = chain["agent"].take()
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    chain.relay()
    await settle()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": 5, "result": {"stopReason": "end_turn"}}
    ]
    recorder.assert_paired()
    shapes = recorder.shapes()
    assert "r editor>plugin1 session/prompt" in shapes
    assert "r plugin1>editor result" in shapes


def test_conductor_errors_are_traced_from_the_conductor() -> None:
    chain, recorder = _traced("agent")
    _initialize(chain)
    recorder.events.clear()
    chain.editor.request(9, "initialize", {"protocolVersion": 1})
    [event] = recorder.events
    assert (event["kind"], event["frm"], event["to"], event["id"]) == (
        "response",
        "conductor",
        "editor",
        9,
    )
    assert event["error"] and event["payload"]["data"] == "already initialized"


def test_a_batch_is_marked_in_the_trace() -> None:
    chain, recorder = _traced(Tags(), "agent")
    _initialize(chain)
    recorder.events.clear()
    chain.editor.send([{"jsonrpc": "2.0", "id": "b1", "method": "session/prompt", "params": {}}, 7])
    [prompt] = chain["agent"].take()
    chain["agent"].respond(prompt["id"], {})
    in_batch = [e for e in recorder.events if e["batch"] is not None]
    assert {f"{e['kind'][0]} {e['frm']}>{e['to']}" for e in in_batch} >= {
        "r editor>plugin1",
        "r conductor>editor",
    }
    assert {e["batch"] for e in in_batch} == {1}
    assert recorder.batch is None


def test_proxy_mode_names_the_successor() -> None:
    chain, recorder = _traced("only:proxy")
    chain.editor.request(1, "_proxy/initialize", {"protocolVersion": 1})
    chain.relay()
    [envelope] = chain.editor.take()
    chain.editor.respond(envelope["id"], {"protocolVersion": 1})
    chain.relay()
    assert recorder.shapes() == [
        "r editor>only initialize",
        "r only>successor initialize",
        "r successor>only result",
        "r only>editor result",
    ]
    recorder.assert_paired()


def test_mcp_responses_are_marked_as_mcp() -> None:
    chain, recorder = _traced("agent")
    _initialize(chain)
    chain.editor.request(
        "s", "session/new", {"mcpServers": [{"type": "acp", "name": "t", "serverId": "ed"}]}
    )
    [new] = chain["agent"].take()
    chain["agent"].respond(new["id"], {"sessionId": "s1"})
    chain.editor.take()
    recorder.events.clear()
    chain["agent"].request(
        5, "mcp/message", {"serverId": "ed", "requestId": "r", "method": "tools/list"}
    )
    [call] = chain.editor.take()
    chain.editor.respond(call["id"], {"result": {}})
    assert [(e["kind"], e["frm"], e["to"]) for e in recorder.events] == [
        ("request", "agent", "editor"),
        ("response", "editor", "agent"),
    ]
    assert recorder.events[1]["protocol"] == "mcp"
    recorder.assert_paired()


def test_a_traced_chain_routes_exactly_as_an_untraced_one() -> None:
    """Tracing takes the slow path: it must deliver the same bytes."""
    line = b'{"jsonrpc":"2.0","id":3,"method":"_vendor/x","params":{"n":1.50,"b":123456789012345678901234567890}}'
    outputs = []
    for observer in (None, Recorder()):
        chain = MemoryChain("proxy", "agent", observer=observer)
        chain.initialize()
        chain.editor.send_raw(line)
        chain.relay()
        [request] = chain["agent"].take_raw()
        our_id = json.loads(request)["id"]
        chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":{"x":1E+2}}' % our_id)
        chain.relay()
        outputs.append((request, chain.editor.take_raw()))
    assert outputs[0] == outputs[1]
