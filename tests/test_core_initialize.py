"""Initialization (spec section 4), in memory: versions read from the raw bytes, the chain
started lazily, `_proxy/initialize` to proxies and `initialize` to the agent byte for byte."""

from __future__ import annotations

import json

import pytest
from memory import MemoryChain

# Every kind of spelling a re-encoding would lose: key order, unknown fields, `_meta`,
# exponents, 30-digit integers, escapes, negative zero, spacing.
EXOTIC = (
    b'{"zeta":1.0e5,"protocolVersion":1,"big":123456789012345678901234567890,'
    b'"clientInfo":{"name":"t\\u00e9st","version":"0"},"_meta":{"x":[1,2.50,-0.0]},'
    b'"clientCapabilities":{"fs":{"readTextFile":false},"unknownCap":{"nested":true}}}'
)
SPACED = b'{ "protocolVersion" : 1 ,\t"a" : [ 1E+2 , 1.50 ] , "b" : { } }'


def _init_line(params: bytes, id: bytes = b"1") -> bytes:
    return b'{"jsonrpc":"2.0","id":' + id + b',"method":"initialize","params":' + params + b"}"


def _params_bytes(line: bytes) -> bytes:
    """The exact bytes of a compact request's params (the line ends with `}}`)."""
    head = b'"params":'
    return line[line.index(head) + len(head) : -1]


# ------------------------------------------------------------------------ versions


@pytest.mark.parametrize("version", [1, 2])
def test_version_1_and_2_go_on_as_sent(version: int) -> None:
    chain = MemoryChain("agent")
    params = b'{"protocolVersion":%d,"n":1.50}' % version
    chain.editor.send_raw(_init_line(params))
    [line] = chain["agent"].take_raw()
    assert _params_bytes(line) == params
    assert chain.router.version == version


@pytest.mark.parametrize(
    ("raw", "pinned"),
    [
        (b'{"protocolVersion":3}', b'{"protocolVersion":2}'),
        (
            b'{"protocolVersion" : 7,"info":{"name":"x","version":"1"},"extra":1.50}',
            b'{"protocolVersion" : 2,"info":{"name":"x","version":"1"},"extra":1.50}',
        ),
        (
            b'{"a":1E+2, "protocolVersion":\t123456789012345678901234567890 ,"z":-0.0}',
            b'{"a":1E+2, "protocolVersion":\t2 ,"z":-0.0}',
        ),
    ],
)
def test_higher_version_is_pinned_to_2_and_every_other_byte_kept(raw: bytes, pinned: bytes) -> None:
    chain = MemoryChain("proxy", "agent")
    chain.editor.send_raw(_init_line(raw))
    [line] = chain["proxy"].take_raw()
    assert json.loads(line)["method"] == "_proxy/initialize"
    assert _params_bytes(line) == pinned
    assert chain.router.version == 2


def test_pinned_version_is_what_the_agent_must_answer() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 5})
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 2})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 2}}]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        (b"{}", -32602),
        (b'{"clientInfo":{}}', -32602),
        (b'{"protocolVersion":"1"}', -32602),
        (b'{"protocolVersion":1.5}', -32602),
        (b'{"protocolVersion":1.0}', -32602),
        (b'{"protocolVersion":-1}', -32602),
        (b'{"protocolVersion":true}', -32602),
        (b'{"protocolVersion":null}', -32602),
        (b'{"protocolVersion":[1]}', -32602),
        (b'{"protocolVersion":0}', -32600),
        (b"[1]", -32602),
    ],
)
def test_invalid_version_is_refused_with_data_and_nothing_starts(params: bytes, code: int) -> None:
    chain = MemoryChain("proxy", "agent")
    chain.editor.send_raw(_init_line(params, b'"i"'))
    [answer] = chain.editor.take()
    assert answer["id"] == "i"
    assert answer["error"]["code"] == code
    assert answer["error"]["data"], "the refusal must say why"
    assert chain.starts == 0 and not chain.started
    assert chain["proxy"].take() == [] and chain["agent"].take() == []


def test_missing_params_is_refused() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize")
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32602 and "missing" in answer["error"]["data"]
    assert chain.starts == 0


def test_refusal_names_what_it_got() -> None:
    chain = MemoryChain("agent")
    chain.editor.send_raw(_init_line(b'{"protocolVersion":1.5}'))
    [answer] = chain.editor.take()
    assert "1.5" in answer["error"]["data"]


def test_corrected_retry_after_refusals_is_accepted() -> None:
    chain = MemoryChain("agent")
    for i, params in enumerate([{}, {"protocolVersion": "2"}, {"protocolVersion": 0}]):
        chain.editor.request(i, "initialize", params)
        [answer] = chain.editor.take()
        assert "error" in answer
    assert chain.starts == 0
    chain.editor.request("ok", "initialize", {"protocolVersion": 2})
    assert chain.starts == 1
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 2})
    [answer] = chain.editor.take()
    assert answer == {"jsonrpc": "2.0", "id": "ok", "result": {"protocolVersion": 2}}


def test_the_chain_starts_on_the_first_valid_initialize_only_once() -> None:
    chain = MemoryChain("agent")
    assert chain.starts == 0
    chain.initialize()
    assert chain.starts == 1
    chain.editor.request(2, "session/new", {"cwd": "/", "mcpServers": []})
    assert chain.starts == 1


# ------------------------------------------------------------- byte for byte


def test_agent_gets_plain_initialize_with_the_editors_params_byte_for_byte() -> None:
    chain = MemoryChain("agent")
    chain.editor.send_raw(_init_line(EXOTIC, b'"init-1"'))
    [line] = chain["agent"].take_raw()
    assert json.loads(line)["method"] == "initialize"
    assert _params_bytes(line) == EXOTIC


def test_every_proxy_gets_proxy_initialize_with_the_editors_params_byte_for_byte() -> None:
    chain = MemoryChain("p1:proxy", "p2:proxy", "agent")
    chain.editor.send_raw(_init_line(EXOTIC))
    [line] = chain["p1"].take_raw()
    assert json.loads(line)["method"] == "_proxy/initialize"
    assert _params_bytes(line) == EXOTIC
    # The proxy forwards it with its own spelling of the envelope; the params stay exact.
    our_id = json.loads(line)["id"]
    chain["p1"].send_raw(
        b'{ "id" : %d, "jsonrpc":"2.0", "method" : "_proxy/successor", "params" : '
        b'{ "params" : %s , "method" : "initialize" } }' % (our_id, EXOTIC)
    )
    [line] = chain["p2"].take_raw()
    assert json.loads(line)["method"] == "_proxy/initialize"
    assert _params_bytes(line) == EXOTIC
    chain["p2"].send_raw(
        b'{"jsonrpc":"2.0","id":%d,"method":"_proxy/successor","params":{"method":"initialize",'
        b'"params":%s}}' % (json.loads(line)["id"], EXOTIC)
    )
    [line] = chain["agent"].take_raw()
    assert json.loads(line)["method"] == "initialize"
    assert _params_bytes(line) == EXOTIC


def test_spaced_params_keep_their_spacing() -> None:
    chain = MemoryChain("agent")
    chain.editor.send_raw(_init_line(SPACED))
    [line] = chain["agent"].take_raw()
    assert SPACED in line


def test_the_agents_initialize_result_reaches_the_editor_byte_for_byte() -> None:
    chain = MemoryChain("proxy", "agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    chain.relay()
    [init] = chain["agent"].take()
    result = (
        b'{"protocolVersion":1,"agentCapabilities":{"x":1.0e5},'
        b'"big":123456789012345678901234567890,"name":"\\u00e9"}'
    )
    chain["agent"].send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (init["id"], result))
    chain.relay()
    [line] = chain.editor.take_raw()
    assert line == b'{"jsonrpc":"2.0","id":1,"result":' + result + b"}"


# -------------------------------------------------------- the agent's answer


def test_agent_answering_another_version_is_an_error_naming_the_mismatch() -> None:
    chain = MemoryChain("old-agent:agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 2})
    [init] = chain["old-agent"].take()
    chain["old-agent"].respond(init["id"], {"protocolVersion": 1})
    [answer] = chain.editor.take()
    error = answer["error"]
    assert answer["id"] == 1
    assert "old-agent" in error["message"] and "mismatch" in error["message"]
    assert error["data"] == {"component": "old-agent", "selected": 2, "answered": 1}


def test_agent_answering_without_a_version_is_a_mismatch() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {})
    [answer] = chain.editor.take()
    assert answer["error"]["data"]["answered"] is None


def test_mismatch_behind_a_proxy_reaches_the_editor_naming_the_agent() -> None:
    chain = MemoryChain("proxy", "agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 2})
    chain.relay()
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    chain.relay()
    [answer] = chain.editor.take()
    assert "agent" in answer["error"]["message"]
    assert answer["error"]["data"]["selected"] == 2


def test_agent_error_to_initialize_is_passed_on_unchanged() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    [init] = chain["agent"].take()
    chain["agent"].send_raw(
        b'{"jsonrpc":"2.0","id":%d,"error":{"code":-32000,"message":"no","data":1.50}}' % init["id"]
    )
    [line] = chain.editor.take_raw()
    assert line == b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no","data":1.50}}'


def test_initialize_may_be_retried_after_a_mismatch() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 2})
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    chain.editor.take()
    chain.editor.request(2, "initialize", {"protocolVersion": 1})
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 2, "result": {"protocolVersion": 1}}]
    assert chain.starts == 1


# ----------------------------------------------------------- out of sequence


def test_initialize_twice_is_refused() -> None:
    chain = MemoryChain("agent")
    chain.initialize()
    chain.editor.request(2, "initialize", {"protocolVersion": 1})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600 and answer["error"]["data"] == "already initialized"
    assert chain["agent"].take() == []


def test_initialize_while_one_is_in_progress_is_refused() -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    chain["agent"].take()
    chain.editor.request(2, "initialize", {"protocolVersion": 1})
    [answer] = chain.editor.take()
    assert answer["id"] == 2 and answer["error"]["code"] == -32600
    assert chain["agent"].take() == []


def test_initialize_as_a_notification_starts_nothing() -> None:
    chain = MemoryChain("agent")
    chain.editor.notify("initialize", {"protocolVersion": 1})
    assert chain.editor.take() == []
    assert chain.starts == 0
    chain.initialize()


@pytest.mark.parametrize("method", ["session/new", "session/prompt", "_vendor/x"])
def test_requests_before_initialize_are_refused(method: str) -> None:
    chain = MemoryChain("agent")
    chain.editor.request(1, method, {"cwd": "/", "mcpServers": []})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600
    assert "initialize" in answer["error"]["data"]
    assert chain.starts == 0


def test_notifications_before_initialize_are_not_forwarded() -> None:
    chain = MemoryChain("agent")
    chain.editor.notify("_vendor/x", {})
    assert chain.editor.take() == [] and chain.starts == 0


@pytest.mark.parametrize("method", ["_proxy/initialize", "proxy/initialize"])
def test_proxy_initialize_from_the_editor_is_refused_when_there_is_an_agent(method: str) -> None:
    chain = MemoryChain("proxy", "agent")
    chain.editor.request(1, method, {"protocolVersion": 1})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600
    assert chain.starts == 0


def test_plain_initialize_in_proxy_mode_is_refused() -> None:
    chain = MemoryChain("proxy")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600 and "_proxy/initialize" in answer["error"]["data"]
    assert chain.starts == 0


def test_proxy_mode_initialize_reaches_the_successor_wrapped() -> None:
    chain = MemoryChain("only:proxy")
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":1,"method":"_proxy/initialize","params":' + EXOTIC + b"}"
    )
    [line] = chain["only"].received
    assert json.loads(line)["method"] == "_proxy/initialize"
    assert _params_bytes(line) == EXOTIC
    chain["only"].relay()
    [line] = chain.editor.take_raw()
    envelope = json.loads(line)
    assert envelope["method"] == "_proxy/successor"
    assert envelope["params"]["method"] == "initialize"
    assert EXOTIC in line
    chain.editor.respond(envelope["id"], {"protocolVersion": 1})
    chain["only"].relay()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}}]


def test_proxy_mode_answers_in_the_parents_dialect() -> None:
    chain = MemoryChain("only:proxy")
    chain.editor.request(1, "proxy/initialize", {"protocolVersion": 1})
    chain["only"].relay()
    [envelope] = chain.editor.take()
    assert envelope["method"] == "proxy/successor"


# ---------------------------------------------------------- while starting


def test_requests_sent_while_the_chain_is_starting_are_routed_after_it_started() -> None:
    chain = MemoryChain("proxy", "agent", start=False)
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    assert chain.starts == 1 and not chain.started
    chain.editor.request(2, "_vendor/early", {"n": 1})
    chain.editor.notify("_vendor/note", {"n": 2})
    assert chain["proxy"].take() == [] and chain.editor.take() == []
    chain.start()
    got = chain["proxy"].take()
    assert [m["method"] for m in got] == ["_proxy/initialize", "_vendor/early", "_vendor/note"]
    assert got[1]["params"] == {"n": 1} and got[2]["params"] == {"n": 2}


def test_chain_failing_to_start_answers_the_initialize_and_a_retry_starts_again() -> None:
    chain = MemoryChain("agent", start=False)
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    chain.router.chain_failed("cannot start agent: no such file")
    [answer] = chain.editor.take()
    assert answer["id"] == 1 and answer["error"]["code"] == -32603
    assert "no such file" in json.dumps(answer["error"])
    chain.editor.request(2, "initialize", {"protocolVersion": 1})
    assert chain.starts == 2
