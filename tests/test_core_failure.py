"""Failure behaviour (spec section 5), in memory: a gone link answers what waits on it, the
shutdown answers the rest with the original cause, bad lines never stop the chain."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from memory import MemoryChain

CAUSE: dict[str, Any] = {
    "message": "agent 'agent' exited with status 3: Traceback ... boom",
    "component": "agent",
    "status": 3,
    "stderr": "Traceback ... boom",
}


def _chain(*components: Any) -> MemoryChain:
    chain = MemoryChain(*components)
    chain.initialize()
    return chain


def _failed_with_cause(answer: dict[str, Any], id: Any) -> None:
    assert answer["id"] == id
    error = answer["error"]
    assert error["code"] == -32603
    assert error["message"] == CAUSE["message"]
    assert error["data"] == CAUSE


# --------------------------------------------------------------- a link fails


def test_link_failed_answers_every_request_pending_on_it_with_the_cause() -> None:
    chain = _chain("agent")
    chain.editor.request(1, "session/prompt", {})
    chain.editor.request("two", "_vendor/x", {})
    chain["agent"].take()
    chain.router.link_failed(chain["agent"].link, CAUSE)  # type: ignore[arg-type]
    answers = chain.editor.take()
    assert len(answers) == 2
    _failed_with_cause(answers[0], 1)
    _failed_with_cause(answers[1], "two")


def test_requests_sent_to_a_gone_link_are_answered_with_the_cause_at_once() -> None:
    chain = _chain("agent")
    chain.router.link_failed(chain["agent"].link, CAUSE)  # type: ignore[arg-type]
    chain.editor.request(2, "_vendor/x", {})
    chain.editor.notify("_vendor/n", {})
    [answer] = chain.editor.take()
    _failed_with_cause(answer, 2)
    assert chain["agent"].take() == []


def test_a_proxy_in_front_of_a_dead_agent_gets_the_cause_and_fail_all_answers_the_editor() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request("p", "session/prompt", {})
    [to_proxy] = chain["proxy"].take()
    chain["proxy"].successor(to_proxy["id"], "session/prompt", {})
    chain["agent"].take()
    chain.router.link_failed(chain["agent"].link, CAUSE)  # type: ignore[arg-type]
    [to_proxy_answer] = chain["proxy"].take()
    _failed_with_cause(to_proxy_answer, to_proxy["id"])
    assert chain.editor.take() == [], "still with the proxy, which may answer it itself"
    chain.router.fail_all(CAUSE)
    [answer] = chain.editor.take()
    _failed_with_cause(answer, "p")


def test_fail_all_answers_every_editor_request_once() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request(1, "_vendor/a", {})
    chain.editor.request(2, "_vendor/b", {})
    chain.relay()
    [first, _second] = chain["agent"].take()
    chain["agent"].respond(first["id"], {"done": True})
    chain.relay()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"done": True}}]
    chain.router.fail_all(CAUSE)
    chain.router.fail_all(CAUSE)
    [answer] = chain.editor.take()
    _failed_with_cause(answer, 2)


def test_a_late_answer_after_the_shutdown_answer_is_dropped() -> None:
    chain = _chain("agent")
    chain.editor.request(1, "_vendor/a", {})
    [request] = chain["agent"].take()
    chain.router.fail_all(CAUSE)
    chain.editor.take()
    chain["agent"].respond(request["id"], {"late": True})
    assert chain.editor.take() == []


def test_fail_all_answers_a_request_held_by_a_plugin_hook() -> None:
    class Holds:
        def on_vendor_local(self, call: Any) -> None:
            pass  # passes it on: the request waits on the agent

    chain = _chain(Holds(), "agent")
    chain.editor.request(1, "_vendor/local", {})
    chain["agent"].take()
    chain.router.fail_all(CAUSE)
    [answer] = chain.editor.take()
    _failed_with_cause(answer, 1)


def test_the_editor_gone_answers_the_agents_requests_to_it() -> None:
    chain = _chain("agent")
    chain["agent"].request("ask", "session/request_permission", {})
    chain.editor.take()
    cause = {"message": "the editor closed its connection", "component": "editor"}
    chain.router.link_failed(chain.editor.link, cause)  # type: ignore[arg-type]
    [answer] = chain["agent"].take()
    assert answer["id"] == "ask" and answer["error"]["data"] == cause


def test_answers_to_a_gone_requester_are_dropped() -> None:
    chain = _chain("agent")
    chain["agent"].request("ask", "session/request_permission", {})
    [request] = chain.editor.take()
    chain.router.link_failed(chain["agent"].link, CAUSE)  # type: ignore[arg-type]
    chain.editor.respond(request["id"], {"outcome": {}})
    assert chain["agent"].take() == [] and chain.editor.take() == []


def test_initialize_pending_when_the_agent_dies_is_answered_with_the_cause() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    chain.router.link_failed(chain["agent"].link, CAUSE)  # type: ignore[arg-type]
    [answer] = chain.editor.take()
    _failed_with_cause(answer, 1)
    assert not chain.router.initializing


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc": "2.0", "id": 1, "method": ',
        b"{'single': 'quotes'}",
        b'{"x": NaN}',
        b'{"x": Infinity}',
        b"\xff\xfe",
        b'{"a":1}{"b":2}',
        b"[1,]",
    ],
)
def test_malformed_editor_input_gets_parse_error_with_id_null(line: bytes) -> None:
    chain = _chain("agent")
    chain.editor.send_raw(line)
    [answer] = chain.editor.take()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    assert chain["agent"].take() == []


def test_the_connection_stays_usable_after_a_parse_error() -> None:
    chain = MemoryChain("agent")
    chain.editor.send_raw(b"not json")
    [error] = chain.editor.take()
    assert error["error"]["code"] == -32700
    chain.initialize()
    chain.editor.request(2, "_vendor/x", {})
    assert [m["method"] for m in chain["agent"].take()] == ["_vendor/x"]


def test_a_parse_error_before_initialize_starts_nothing() -> None:
    chain = MemoryChain("agent")
    chain.editor.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"initialize"')
    assert chain.editor.take()[0]["error"]["code"] == -32700
    assert chain.starts == 0


def test_malformed_component_output_is_dropped_logged_with_its_name_and_the_chain_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chain = _chain("noisy:proxy", "agent")
    with caplog.at_level(logging.WARNING, logger="conductor"):
        chain["noisy"].send_raw(b"Loading model... 50%")
        chain["agent"].send_raw(b'{"jsonrpc":"2.0","method":')
    assert chain.editor.take() == [] and chain["noisy"].take() == []
    assert chain["agent"].take() == []
    assert "noisy" in caplog.text
    chain.editor.request(7, "_vendor/echo", {"a": 1})
    chain.relay()
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {"a": 1})
    chain.relay()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 7, "result": {"a": 1}}]


@pytest.mark.parametrize("line", [b"", b" ", b"\t", b"\r", b"  \r"])
def test_blank_lines_are_no_messages(line: bytes) -> None:
    chain = _chain("proxy", "agent")
    chain.editor.send_raw(line)
    chain["proxy"].send_raw(line)
    chain["agent"].send_raw(line)
    assert chain.editor.take() == [] and chain["proxy"].take() == [] and chain["agent"].take() == []


def test_blank_lines_before_initialize_start_nothing() -> None:
    chain = MemoryChain("agent")
    chain.editor.send_raw(b"")
    assert chain.editor.take() == [] and chain.starts == 0


# ---------------------------------------- valid JSON that doubles cannot hold

BEYOND = b'{"huge":1e400,"tiny":-1e400,"list":[1e400],"s":"\\ud800","big":123456789012345678901234567890}'


def test_beyond_double_and_lone_surrogates_from_the_editor_are_routed_exactly() -> None:
    chain = _chain("proxy", "agent")
    line = b'{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":' + BEYOND + b"}"
    chain.editor.send_raw(line)
    [at_proxy] = chain["proxy"].received
    assert at_proxy.endswith(b'"params":' + BEYOND + b"}")
    chain.relay()
    [at_agent] = chain["agent"].take_raw()
    assert at_agent.endswith(b'"params":' + BEYOND + b"}")
    assert chain.editor.take() == [], "valid JSON: no -32700"


def test_beyond_double_and_lone_surrogates_from_the_agent_are_routed_exactly() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request(5, "_vendor/raw", {})
    chain.relay()
    [request] = chain["agent"].take()
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","method":"session/update","params":' + BEYOND + b"}")
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (request["id"], BEYOND))
    chain.relay()
    update, answer = chain.editor.take_raw()
    assert update == b'{"jsonrpc":"2.0","method":"session/update","params":' + BEYOND + b"}"
    assert answer == b'{"jsonrpc":"2.0","id":5,"result":' + BEYOND + b"}"


def test_a_request_id_next_to_1e400_is_still_paired() -> None:
    chain = _chain("agent")
    chain.editor.send_raw(b'{"jsonrpc":"2.0","id":"x","method":"_vendor/x","params":{"n":1e400}}')
    [request] = chain["agent"].take()
    assert request["params"] == {"n": float("inf")}
    chain["agent"].respond(request["id"], {})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": "x", "result": {}}]


def test_invalid_utf8_inside_a_string_is_a_parse_error() -> None:
    chain = _chain("agent")
    chain.editor.send_raw(b'{"jsonrpc":"2.0","method":"_vendor/x","params":{"s":"\xff"}}')
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32700
    assert json.dumps(answer)  # the error itself is valid JSON
