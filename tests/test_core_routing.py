"""Routing (spec section 4), in memory: successor envelopes, hop-local ids, requests both
ways, order between peers, unknown methods and fields, proxy mode."""

from __future__ import annotations

import json
from typing import Any

import pytest
from memory import MemoryChain

EXOTIC = (
    b'{"zeta":1.0e5,"big":123456789012345678901234567890,"w":"caf\\u00e9",'
    b'"_meta":{"x":[1,2.50,-0.0]},"deep":{"unknown":[null,true,{"k":1E+2}]}}'
)


def _chain(*components: str, **kwargs: Any) -> MemoryChain:
    chain = MemoryChain(*components, **kwargs)
    chain.initialize()
    return chain


def _envelope_line(id: int | None, inner: bytes, method: bytes = b"_proxy/successor") -> bytes:
    head = b'{"jsonrpc":"2.0",' + (b"" if id is None else b'"id":%d,' % id)
    return head + b'"method":"' + method + b'","params":' + inner + b"}"


# ------------------------------------------------------------ envelopes down


def test_successor_request_is_unwrapped_for_the_agent_with_exact_params() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].send_raw(_envelope_line(41, b'{"method":"_vendor/go","params":' + EXOTIC + b"}"))
    [line] = chain["agent"].take_raw()
    message = json.loads(line)
    assert message["method"] == "_vendor/go" and isinstance(message["id"], int)
    assert "_proxy/successor" not in line.decode()
    assert line.endswith(b'"params":' + EXOTIC + b"}")


def test_successor_notification_is_unwrapped_for_the_agent_with_exact_params() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].send_raw(
        _envelope_line(None, b'{"method":"_vendor/n","params":' + EXOTIC + b"}")
    )
    [line] = chain["agent"].take_raw()
    assert line == b'{"jsonrpc":"2.0","method":"_vendor/n","params":' + EXOTIC + b"}"


def test_successor_without_params_is_unwrapped_without_params() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].successor(None, "_vendor/bare")
    assert chain["agent"].take() == [{"jsonrpc": "2.0", "method": "_vendor/bare"}]


@pytest.mark.parametrize(
    "inner",
    [
        b'{ "params" : ' + EXOTIC + b' , "method" : "_vendor/go" }',
        b'{"method":"_vendor/go","_meta":{"hop":1},"params":' + EXOTIC + b"}",
        b'{"params":' + EXOTIC + b',"meta":{"hop":1},"method":"_vendor/go"}',
        b'{\n  "method": "_vendor/go",\n  "params": ' + EXOTIC + b"\n}",
    ],
    ids=["reordered-spaced", "_meta", "legacy-meta", "pretty"],
)
def test_envelopes_in_any_spelling_are_unwrapped_exactly(inner: bytes) -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].send_raw(
        b'{ "id" : 3 , "method" : "_proxy/successor", "jsonrpc" : "2.0", '
        b'"params" : ' + inner + b" }"
    )
    [line] = chain["agent"].take_raw()
    message = json.loads(line)
    assert message["method"] == "_vendor/go"
    assert set(message) == {"jsonrpc", "id", "method", "params"}
    assert EXOTIC in line


def test_a_compact_envelope_with_its_id_last_is_unwrapped_exactly() -> None:
    """`{jsonrpc, method, params, id}` is how many JSON-RPC libraries order a request."""
    chain = _chain("proxy", "agent")
    chain["proxy"].send_raw(
        b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"session/prompt",'
        b'"params":{"sessionId":"s","n":1.50}},"id":5}'
    )
    [line] = chain["agent"].take_raw()
    message = json.loads(line)  # valid JSON, first of all
    assert message["method"] == "session/prompt"
    assert line.endswith(b'"params":{"sessionId":"s","n":1.50}}')


def test_envelope_meta_is_hop_local() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].request(
        1, "_proxy/successor", {"method": "_vendor/x", "params": {"a": 1}, "_meta": {"hop": 1}}
    )
    chain["proxy"].notify(
        "_proxy/successor", {"method": "_vendor/y", "params": {"a": 2}, "meta": {"hop": 2}}
    )
    got = chain["agent"].take()
    assert [m["params"] for m in got] == [{"a": 1}, {"a": 2}]
    assert all("hop" not in json.dumps(m) for m in got)


# -------------------------------------------------------------- envelopes up


def test_notification_from_the_agent_reaches_the_proxy_wrapped_with_exact_params() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","method":"session/update","params":' + EXOTIC + b"}")
    [line] = chain["proxy"].take_raw()
    message = json.loads(line)
    assert message["method"] == "_proxy/successor"
    assert message["params"]["method"] == "session/update"
    assert b'"params":' + EXOTIC + b"}}" in line


def test_spaced_notification_from_the_agent_is_wrapped_with_exact_params() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].send_raw(
        b'{ "params" : ' + EXOTIC + b', "method" : "_vendor/n", "jsonrpc":"2.0"}'
    )
    [line] = chain["proxy"].take_raw()
    message = json.loads(line)
    assert message["params"]["method"] == "_vendor/n"
    assert EXOTIC in line


def test_request_from_the_agent_reaches_the_proxy_wrapped_with_a_conductor_id() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].send_raw(
        b'{"jsonrpc":"2.0","id":"perm-1","method":"session/request_permission","params":'
        + EXOTIC
        + b"}"
    )
    [line] = chain["proxy"].take_raw()
    message = json.loads(line)
    assert message["method"] == "_proxy/successor" and isinstance(message["id"], int)
    assert message["params"]["method"] == "session/request_permission"
    assert EXOTIC in line


def test_plain_messages_from_a_proxy_go_to_the_editor_plain() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].send_raw(b'{"jsonrpc":"2.0","method":"_vendor/up","params":' + EXOTIC + b"}")
    assert chain.editor.take_raw() == [
        b'{"jsonrpc":"2.0","method":"_vendor/up","params":' + EXOTIC + b"}"
    ]
    chain["proxy"].request(77, "_vendor/ask", {"q": 1})
    [request] = chain.editor.take()
    assert request["method"] == "_vendor/ask" and request["params"] == {"q": 1}
    chain.editor.respond(request["id"], {"a": 2})
    assert chain["proxy"].take() == [{"jsonrpc": "2.0", "id": 77, "result": {"a": 2}}]
    assert chain["agent"].take() == []


def test_plain_messages_from_the_second_proxy_go_to_the_first_wrapped() -> None:
    chain = _chain("p1:proxy", "p2:proxy", "agent")
    chain["p2"].notify("_vendor/up", {"n": 1})
    assert chain["p1"].take() == [
        {
            "jsonrpc": "2.0",
            "method": "_proxy/successor",
            "params": {"method": "_vendor/up", "params": {"n": 1}},
        }
    ]
    assert chain.editor.take() == []


# ------------------------------------------------------------ invalid envelopes


@pytest.mark.parametrize(
    "params",
    [
        {"params": {}},
        {"method": 5},
        {"method": None},
        {"method": "x", "params": 3},
        {"method": "x", "params": "s"},
        {"method": "x", "params": True},
    ],
    ids=["no-method", "int-method", "null-method", "int-params", "str-params", "bool-params"],
)
def test_invalid_envelope_request_gets_the_conductors_own_error_naming_the_proxy(
    params: dict[str, Any],
) -> None:
    chain = _chain("filter:proxy", "agent")
    chain["filter"].request(9, "_proxy/successor", params)
    [answer] = chain["filter"].take()
    assert answer["id"] == 9
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"] == "Invalid successor envelope"
    assert answer["error"]["data"]["component"] == "filter"
    assert answer["error"]["data"]["reason"]
    assert chain["agent"].take() == [] and chain.editor.take() == []


@pytest.mark.parametrize("params", [[1, 2], "x", 5, None])
def test_envelope_params_not_an_object_is_refused(params: Any) -> None:
    """An envelope whose own params are no object is an invalid envelope: the proxy's
    request is answered (a request nobody answers leaves the proxy waiting forever)."""
    chain = _chain("filter:proxy", "agent")
    chain["filter"].request(9, "_proxy/successor", params)
    [answer] = chain["filter"].take()
    assert answer["id"] == 9 and "error" in answer
    assert chain["agent"].take() == []


def test_invalid_envelope_notification_is_dropped() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].notify("_proxy/successor", {"params": {}})
    chain["proxy"].notify("_proxy/successor", {"method": "x", "params": 3})
    assert chain["proxy"].take() == [] and chain["agent"].take() == []
    assert chain.editor.take() == []


@pytest.mark.parametrize("method", ["_proxy/initialize", "proxy/initialize"])
def test_wrapped_proxy_initialize_is_refused(method: str) -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].successor(4, method, {"protocolVersion": 1})
    [answer] = chain["proxy"].take()
    assert answer["id"] == 4 and answer["error"]["code"] == -32600
    assert chain["agent"].take() == []


@pytest.mark.parametrize("method", ["_proxy/initialize", "proxy/initialize"])
def test_plain_proxy_initialize_sent_upward_is_refused_and_never_reaches_the_editor(
    method: str,
) -> None:
    chain = _chain("p1:proxy", "p2:proxy", "agent")
    chain["p1"].request(4, method, {"protocolVersion": 1})
    chain["p2"].request(5, method, {"protocolVersion": 1})
    [answer1] = chain["p1"].take()
    [answer2] = chain["p2"].take()
    assert answer1["id"] == 4 and answer1["error"]["code"] == -32600
    assert answer2["id"] == 5 and answer2["error"]["code"] == -32600
    assert chain.editor.take() == []


def test_agent_sending_proxy_initialize_is_refused() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].request(4, "_proxy/initialize", {"protocolVersion": 1})
    [answer] = chain["agent"].take()
    assert answer["error"]["code"] == -32600
    assert chain["proxy"].take() == []


# ---------------------------------------------------------- results come back


def test_wrapped_request_result_comes_back_byte_for_byte() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].successor(12, "_vendor/go", {})
    [request] = chain["agent"].take()
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (request["id"], EXOTIC))
    assert chain["proxy"].take_raw() == [b'{"jsonrpc":"2.0","id":12,"result":' + EXOTIC + b"}"]


def test_wrapped_request_error_comes_back_byte_for_byte() -> None:
    chain = _chain("proxy", "agent")
    chain["proxy"].successor("s-1", "_vendor/go", {})
    [request] = chain["agent"].take()
    error = b'{"code":-32099,"message":"m\\u00e9h","data":' + EXOTIC + b"}"
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"error":%s}' % (request["id"], error))
    assert chain["proxy"].take_raw() == [b'{"jsonrpc":"2.0","id":"s-1","error":' + error + b"}"]


def test_spaced_response_keeps_its_spelling_but_gets_the_original_id() -> None:
    chain = _chain("agent")
    chain.editor.request("e", "_vendor/go", {})
    [request] = chain["agent"].take()
    chain["agent"].send_raw(
        b'{ "result" : ' + EXOTIC + b', "id" : %d , "jsonrpc":"2.0"}' % request["id"]
    )
    [line] = chain.editor.take_raw()
    assert json.loads(line)["id"] == "e"
    assert EXOTIC in line


def test_editor_answer_to_an_agent_request_comes_back_byte_for_byte() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].request("perm", "session/request_permission", {"sessionId": "s"})
    chain.relay()
    [request] = chain.editor.take()
    chain.editor.send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (request["id"], EXOTIC))
    chain.relay()
    assert chain["agent"].take_raw() == [b'{"jsonrpc":"2.0","id":"perm","result":' + EXOTIC + b"}"]


# ------------------------------------------------------------------ hop-local ids


@pytest.mark.parametrize(
    "editor_id",
    [1, 0, -5, "1", "", "x" * 40, 2**40, 2**63 - 1, "caf\u00e9", None],
    ids=repr,
)
def test_ids_are_hop_local_for_any_id_type(editor_id: Any) -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request(editor_id, "_vendor/echo", {"tag": repr(editor_id)})
    [to_proxy] = chain["proxy"].take()
    assert type(to_proxy["id"]) is int
    chain["proxy"].successor(to_proxy["id"], "_vendor/echo", to_proxy["params"])
    [to_agent] = chain["agent"].take()
    assert type(to_agent["id"]) is int
    chain["agent"].respond(to_agent["id"], {"tag": to_agent["params"]["tag"]})
    chain.relay()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": editor_id, "result": {"tag": repr(editor_id)}}
    ]


def test_a_30_digit_integer_id_is_an_id_like_any_other() -> None:
    """JSON-RPC ids are numbers or strings; a 30-digit integer is a number, and its answer
    must carry it back exactly."""
    chain = _chain("agent")
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"_vendor/x"}'
    )
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {})
    assert chain.editor.take_raw() == [
        b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{}}'
    ]


@pytest.mark.parametrize("raw_id", [b"1.5", b"true", b"[1]", b"{}"])
def test_ids_that_are_not_numbers_or_strings_are_refused(raw_id: bytes) -> None:
    chain = _chain("agent")
    chain.editor.send_raw(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"_vendor/x"}')
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600
    assert chain["agent"].take() == []


def test_the_editors_id_bytes_come_back_exactly() -> None:
    chain = _chain("agent")
    chain.editor.send_raw(b'{"jsonrpc":"2.0","id":"\\u0041b","method":"_vendor/x"}')
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {})
    assert chain.editor.take_raw() == [b'{"jsonrpc":"2.0","id":"\\u0041b","result":{}}']


def test_the_same_id_from_every_hop_never_collides() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.request(1, "_vendor/from-editor", {})
    [to_proxy] = chain["proxy"].take()
    chain["proxy"].successor(to_proxy["id"], "_vendor/from-editor", {})
    chain["proxy"].successor(1, "_vendor/from-proxy", {})  # the proxy's own id 1, twice over
    chain["agent"].request(1, "_vendor/from-agent", {})  # and the agent's id 1
    to_agent = chain["agent"].take()
    assert len({m["id"] for m in to_agent}) == 2
    [up] = chain["proxy"].take()
    assert up["params"]["method"] == "_vendor/from-agent"
    assert up["id"] != to_proxy["id"], "a proxy's ids are unique across both its sides"
    by_method = {m["method"]: m["id"] for m in to_agent}
    chain["agent"].respond(by_method["_vendor/from-proxy"], {"who": "proxy"})
    chain["agent"].respond(by_method["_vendor/from-editor"], {"who": "editor"})
    got = chain["proxy"].take()
    assert {"jsonrpc": "2.0", "id": 1, "result": {"who": "proxy"}} in got
    reply = next(m for m in got if m["result"] == {"who": "editor"})
    chain["proxy"].respond(to_proxy["id"], reply["result"])
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"who": "editor"}}]
    chain["proxy"].request(up["id"], "_vendor/from-agent", {})
    [to_editor] = chain.editor.take()
    chain.editor.respond(to_editor["id"], {"who": "agent"})
    chain.relay()
    assert chain["agent"].take() == [{"jsonrpc": "2.0", "id": 1, "result": {"who": "agent"}}]


def test_answers_to_unknown_ids_are_dropped() -> None:
    chain = _chain("proxy", "agent")
    chain["agent"].respond(999, {"stray": True})
    chain.editor.respond(999, {"stray": True})
    chain["proxy"].respond("nope", {})
    assert chain.editor.take() == [] and chain["proxy"].take() == [] and chain["agent"].take() == []


def test_a_request_is_answered_once() -> None:
    chain = _chain("agent")
    chain.editor.request(1, "_vendor/x", {})
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {"n": 1})
    chain["agent"].respond(request["id"], {"n": 2})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"n": 1}}]


# ------------------------------------------------------------ both directions


def test_permission_request_travels_up_through_every_proxy_and_its_answer_down() -> None:
    chain = _chain("p1:proxy", "p2:proxy", "agent")
    chain["agent"].send_raw(
        b'{"jsonrpc":"2.0","id":"ask","method":"session/request_permission",'
        b'"params":{"sessionId":"s","n":1.50}}'
    )
    [at_p2] = chain["p2"].received
    assert json.loads(at_p2)["method"] == "_proxy/successor"
    chain["p2"].relay()
    [at_p1] = chain["p1"].received
    assert json.loads(at_p1)["params"]["method"] == "session/request_permission"
    chain["p1"].relay()
    [line] = chain.editor.take_raw()
    request = json.loads(line)
    assert request["method"] == "session/request_permission"
    assert line.endswith(b'"params":{"sessionId":"s","n":1.50}}')
    chain.editor.respond(request["id"], {"outcome": {"outcome": "selected", "optionId": "allow"}})
    chain.relay()
    assert chain["agent"].take() == [
        {
            "jsonrpc": "2.0",
            "id": "ask",
            "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
        }
    ]


def test_a_prompt_round_trip_through_two_proxies() -> None:
    chain = _chain("p1:proxy", "p2:proxy", "agent")
    chain.editor.request("p", "session/prompt", {"sessionId": "s", "prompt": []})
    chain.relay()
    [prompt] = chain["agent"].take()
    assert prompt["method"] == "session/prompt"
    for n in range(5):
        chain["agent"].notify("session/update", {"sessionId": "s", "n": n})
    chain["agent"].respond(prompt["id"], {"stopReason": "end_turn"})
    chain.relay()
    got = chain.editor.take()
    assert [m.get("params", {}).get("n") for m in got] == [0, 1, 2, 3, 4, None]
    assert got[-1] == {"jsonrpc": "2.0", "id": "p", "result": {"stopReason": "end_turn"}}


def test_order_between_two_peers_is_kept_both_ways() -> None:
    chain = _chain("proxy", "agent")
    for n in range(20):
        chain.editor.notify("_vendor/down", {"n": n})
        chain.editor.request(n, "_vendor/req", {"n": n})
    chain.relay()
    assert [m["params"]["n"] for m in chain["agent"].take()] == [n for n in range(20) for _ in "ab"]


# ---------------------------------------------------------------- forwarded as is


def test_unknown_methods_and_top_level_fields_are_forwarded() -> None:
    chain = _chain("agent")
    line = (
        b'{"jsonrpc":"2.0","id":4,"method":"_unknown/thing","params":' + EXOTIC + b',"x-extra":[1]}'
    )
    chain.editor.send_raw(line)
    [got] = chain["agent"].take_raw()
    assert json.loads(got)["method"] == "_unknown/thing"
    assert got == line.replace(b'"id":4', b'"id":%d' % json.loads(got)["id"])
    chain.editor.send_raw(b'{"jsonrpc":"2.0","method":"_unknown/note","x-extra":true}')
    assert chain["agent"].take_raw() == [
        b'{"jsonrpc":"2.0","method":"_unknown/note","x-extra":true}'
    ]


def test_unknown_fields_in_a_response_are_forwarded() -> None:
    chain = _chain("agent")
    chain.editor.request(4, "_vendor/x", {})
    [request] = chain["agent"].take()
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":{},"x-extra":1.50}' % request["id"])
    assert chain.editor.take_raw() == [b'{"jsonrpc":"2.0","id":4,"result":{},"x-extra":1.50}']


def test_array_params_are_forwarded() -> None:
    chain = _chain("proxy", "agent")
    chain.editor.send_raw(b'{"jsonrpc":"2.0","method":"_vendor/n","params":[1.50, "a"]}')
    chain.relay()
    assert chain["agent"].take_raw() == [
        b'{"jsonrpc":"2.0","method":"_vendor/n","params":[1.50, "a"]}'
    ]


def test_editor_messages_that_are_not_json_rpc_objects_get_minus_32600() -> None:
    chain = _chain("agent")
    for line in [b"5", b'"x"', b"null", b'{"jsonrpc":"2.0"}', b'{"jsonrpc":"2.0","id":3}']:
        chain.editor.send_raw(line)
        [answer] = chain.editor.take()
        assert answer["error"]["code"] == -32600, line
    assert chain["agent"].take() == []


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":1,"method":5}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":3}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":"s"}',
    ],
)
def test_editor_requests_with_an_invalid_method_or_params_get_minus_32600(line: bytes) -> None:
    chain = _chain("agent")
    chain.editor.send_raw(line)
    [answer] = chain.editor.take()
    assert answer == {"jsonrpc": "2.0", "id": 1, "error": answer["error"]}
    assert answer["error"]["code"] == -32600
    assert chain["agent"].take() == []


# -------------------------------------------------------------------- proxy mode


def _proxy_mode() -> MemoryChain:
    chain = MemoryChain("only:proxy")
    chain.editor.request(1, "_proxy/initialize", {"protocolVersion": 1})
    chain.relay()
    [envelope] = chain.editor.take()
    chain.editor.respond(envelope["id"], {"protocolVersion": 1})
    chain.relay()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}}]
    return chain


def test_proxy_mode_the_last_proxys_successor_is_the_editor_link_wrapped() -> None:
    chain = _proxy_mode()
    chain.editor.request(2, "session/prompt", {"sessionId": "s"})
    [prompt] = chain["only"].take()
    assert prompt["method"] == "session/prompt" and prompt["params"] == {"sessionId": "s"}
    chain["only"].successor(prompt["id"], "session/prompt", {"sessionId": "s", "tagged": True})
    [down] = chain.editor.take()
    assert down["method"] == "_proxy/successor"
    assert down["params"] == {
        "method": "session/prompt",
        "params": {"sessionId": "s", "tagged": True},
    }
    # Our successor's messages come in the envelope; the proxy gets them wrapped.
    chain.editor.notify("_proxy/successor", {"method": "session/update", "params": {"n": 1}})
    [update] = chain["only"].take()
    assert update == {
        "jsonrpc": "2.0",
        "method": "_proxy/successor",
        "params": {"method": "session/update", "params": {"n": 1}},
    }
    chain.editor.respond(down["id"], {"stopReason": "end_turn"})
    [answer] = chain["only"].take()
    assert answer == {"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}
    chain["only"].respond(prompt["id"], answer["result"])
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}
    ]


def test_proxy_mode_requests_from_the_successor_go_up_and_are_answered() -> None:
    chain = _proxy_mode()
    chain.editor.request(
        "up", "_proxy/successor", {"method": "session/request_permission", "params": {"q": 1}}
    )
    chain.relay()
    [request] = chain.editor.take()
    assert request["method"] == "session/request_permission"
    chain.editor.respond(request["id"], {"ok": True})
    chain.relay()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": "up", "result": {"ok": True}}]


def test_proxy_mode_invalid_envelopes_from_the_successor_name_it() -> None:
    chain = _proxy_mode()
    for i, params in enumerate([{"params": {}}, {"method": 5}, {"method": "x", "params": 3}]):
        chain.editor.request(f"bad{i}", "_proxy/successor", params)
        [answer] = chain.editor.take()
        assert answer["id"] == f"bad{i}"
        assert answer["error"]["message"] == "Invalid successor envelope"
        assert answer["error"]["data"]["component"] == "successor"
    chain.editor.request("init", "_proxy/successor", {"method": "_proxy/initialize", "params": {}})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600


def test_proxy_mode_with_a_plugin_as_the_only_proxy() -> None:
    class Tags:
        def on_session_prompt(self, call: Any) -> None:
            call.params["tagged"] = True

    chain = MemoryChain(Tags())
    chain.editor.request(1, "_proxy/initialize", {"protocolVersion": 1})
    [envelope] = chain.editor.take()
    assert envelope["method"] == "_proxy/successor"
    assert envelope["params"] == {"method": "initialize", "params": {"protocolVersion": 1}}
    chain.editor.respond(envelope["id"], {"protocolVersion": 1})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}}]
    chain.editor.request(2, "session/prompt", {})
    [down] = chain.editor.take()
    assert down["method"] == "_proxy/successor"
    assert down["params"] == {"method": "session/prompt", "params": {"tagged": True}}
    chain.editor.notify("_proxy/successor", {"method": "session/update", "params": {"n": 1}})
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "method": "session/update", "params": {"n": 1}}
    ]
