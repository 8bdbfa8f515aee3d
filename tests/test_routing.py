"""Wire rules of spec section 4, each tested end to end through real pipes and processes."""

from __future__ import annotations

import json

from conftest import (
    agent_text,
    demo_agent_block,
    init_params,
    prompt_params,
    proxy_block,
    read_jsonl,
    script_agent_block,
    start_session,
)

EXOTIC_PARAMS = (
    b'{"protocolVersion":1,"zeta":1.0e5,"big":123456789012345678901234567890,'
    b'"clientInfo":{"name":"t\\u00e9st","version":"0"},"_meta":{"x":[1,2.50,-0.0]},'
    b'"clientCapabilities":{"fs":{"readTextFile":false},"unknownCap":{"nested":true}}}'
)


def test_initialize_params_reach_the_agent_byte_for_byte(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(script_agent_block("--record", str(record)))
    peer = conductor(chain)
    peer.send_raw(
        b'{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":' + EXOTIC_PARAMS + b"}"
    )
    _, response = peer.response("init-1")
    assert response["result"]["protocolVersion"] == 1
    first = record.read_bytes().splitlines()[0]
    assert first.count(EXOTIC_PARAMS) == 1
    assert json.loads(first)["method"] == "initialize"


def test_proxy_gets_proxy_initialize_with_identical_params(make_chain, conductor, tmp_path):
    log = tmp_path / "proxy.jsonl"
    chain = make_chain(proxy_block("--log", str(log)) + script_agent_block())
    peer = conductor(chain)
    peer.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":' + EXOTIC_PARAMS + b"}")
    _, response = peer.response(1)
    assert "result" in response
    first = log.read_bytes().splitlines()[0]
    assert json.loads(first)["method"] == "_proxy/initialize"
    assert EXOTIC_PARAMS in first


def test_unwrapped_params_reach_the_agent_byte_for_byte(make_chain, conductor, tmp_path):
    sent, record = tmp_path / "proxy-out.jsonl", tmp_path / "agent.jsonl"
    chain = make_chain(
        proxy_block("--spaced", "--log-out", str(sent))
        + script_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    start_session(peer)
    peer.request(3, "_test/echo", {"word": "caf\u00e9", "n": [1.5, 10**25]})
    peer.response(3)
    envelopes = [json.loads(line) for line in sent.read_bytes().splitlines()]
    echo = next(e for e in envelopes if e.get("params", {}).get("method") == "_test/echo")
    inner = json.dumps(echo["params"]["params"]).encode()
    assert b"\\u00e9" in inner
    received = [line for line in record.read_bytes().splitlines() if b"_test/echo" in line]
    assert len(received) == 1 and inner in received[0]


def test_higher_version_is_pinned_to_2_and_nothing_else_changes(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(script_agent_block("--record", str(record)))
    peer = conductor(chain)
    params = b'{"protocolVersion" : 7,"info":{"name":"x","version":"1"},"extra":1.50}'
    peer.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":' + params + b"}")
    _, response = peer.response(1)
    assert response["result"]["protocolVersion"] == 2
    first = record.read_bytes().splitlines()[0]
    assert params.replace(b"7", b"2") in first


def test_invalid_versions_are_refused_without_spawning_and_retry_works(
    make_chain, conductor, tmp_path
):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(script_agent_block("--record", str(record)))
    peer = conductor(chain)
    cases = [({}, -32602), ({"protocolVersion": "1"}, -32602), ({"protocolVersion": 1.5}, -32602)]
    cases += [({"protocolVersion": -1}, -32602), ({"protocolVersion": 0}, -32600)]
    for i, (params, code) in enumerate(cases):
        peer.request(i, "initialize", params)
        _, response = peer.response(i)
        assert response["error"]["code"] == code, response
        assert response["error"]["data"]
    assert not record.exists(), "nothing may be spawned before a valid initialize"
    peer.request(99, "initialize", init_params(1))
    _, response = peer.response(99)
    assert response["result"]["protocolVersion"] == 1


def test_agent_answering_another_version_is_an_error_naming_the_mismatch(make_chain, conductor):
    chain = make_chain(script_agent_block("--wrong-version", "1", name="old-agent"))
    peer = conductor(chain)
    peer.request(1, "initialize", init_params(2))
    _, response = peer.response(1)
    error = response["error"]
    assert "old-agent" in error["message"] and "mismatch" in error["message"]
    assert error["data"]["selected"] == 2 and error["data"]["answered"] == 1


def test_ids_are_hop_local_for_any_id_type(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(proxy_block() + script_agent_block("--record", str(record)))
    peer = conductor(chain)
    peer.request("a", "initialize", init_params(1))
    peer.response("a")
    ids = ["1", 1, "x" * 40, 2**40]
    for i in ids:
        peer.request(i, "_test/echo", {"tag": repr(i)})
    answers = {}
    for _ in ids:
        message = peer.read()
        answers[repr(message["id"])] = message["result"]["params"]["tag"]
    assert answers == {repr(i): repr(i) for i in ids}
    agent_ids = [m["id"] for m in read_jsonl(record) if m.get("method") == "_test/echo"]
    assert len(set(agent_ids)) == len(ids)
    assert all(isinstance(i, int) for i in agent_ids)


def test_permission_round_trip_through_two_proxies(make_chain, conductor, tmp_path):
    logs = [tmp_path / "p1.jsonl", tmp_path / "p2.jsonl"]
    chain = make_chain(
        proxy_block("--tag", "<1>", "--log", str(logs[0]))
        + proxy_block("--tag", "<2>", "--log", str(logs[1]))
        + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "please ask permission"))
    _before, request = peer.read_until(lambda m: m.get("method") == "session/request_permission")
    allow = next(o for o in request["params"]["options"] if o["kind"].startswith("allow"))
    peer.send(
        {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}},
        }
    )
    updates, response = peer.response(5)
    assert response["result"]["stopReason"] == "end_turn"
    chunks = [
        u["params"]["update"]["content"]["text"]
        for u in updates
        if u.get("method") == "session/update"
        and u["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert chunks and all(c.startswith("<1><2>") for c in chunks)
    assert "granted" in agent_text(updates).replace("<1><2>", "").lower()
    # The request went up through both proxies, wrapped as a successor message each time.
    for log in logs:
        wrapped = [m for m in read_jsonl(log) if m.get("method") == "_proxy/successor"]
        assert any(m["params"]["method"] == "session/request_permission" for m in wrapped)


def test_cancel_request_is_translated_hop_by_hop(make_chain, conductor, tmp_path):
    log = tmp_path / "proxy.jsonl"
    chain = make_chain(
        proxy_block("--log", str(log)) + demo_agent_block("--delay", "0.3", "--chunks", "20")
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request("p", "session/prompt", prompt_params(session, "a long answer please"))
    peer.read_until(lambda m: m.get("method") == "session/update")
    peer.notify("$/cancel_request", {"requestId": "p"})
    _, response = peer.response("p", timeout=10)
    assert (
        response.get("error", {}).get("code") == -32800
        or response.get("result", {}).get("stopReason") == "cancelled"
    )
    sent = read_jsonl(log)
    forwarded = next(m for m in sent if m.get("method") == "session/prompt")
    cancels = [m for m in sent if m.get("method") == "$/cancel_request"]
    assert cancels == [
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": forwarded["id"]}}
    ]


def test_cancel_for_unknown_id_is_not_forwarded(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(script_agent_block("--record", str(record)))
    peer = conductor(chain)
    start_session(peer)
    peer.notify("$/cancel_request", {"requestId": 12345})
    peer.request(9, "_test/echo", {})
    peer.response(9)
    assert not [m for m in read_jsonl(record) if m.get("method") == "$/cancel_request"]


def test_batches(make_chain, conductor):
    chain = make_chain(script_agent_block())
    peer = conductor(chain)
    start_session(peer)
    peer.send_raw(b"[]")
    assert peer.read() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid Request", "data": "empty batch"},
    }
    peer.send(
        [{"jsonrpc": "2.0", "method": "_test/note"}, {"jsonrpc": "2.0", "method": "_test/other"}]
    )
    peer.assert_silent()
    peer.send(
        [
            {"jsonrpc": "2.0", "id": "e1", "method": "_test/echo", "params": {"n": 1}},
            5,
            {"jsonrpc": "2.0", "method": "_test/note"},
            {"jsonrpc": "2.0", "id": "e2", "method": "_test/echo", "params": {"n": 2}},
        ]
    )
    batch = peer.read()
    assert isinstance(batch, list) and len(batch) == 3
    by_id = {m["id"]: m for m in batch}
    assert by_id["e1"]["result"]["params"] == {"n": 1}
    assert by_id["e2"]["result"]["params"] == {"n": 2}
    assert by_id[None]["error"]["code"] == -32600


def test_updates_arrive_before_the_prompt_response_in_order(make_chain, conductor):
    chain = make_chain(proxy_block() + script_agent_block("--flood", "200"))
    peer = conductor(chain)
    session = start_session(peer)
    updates, response = peer.prompt(3, session, "go")
    assert response["result"]["stopReason"] == "end_turn"
    numbers = [int(u["params"]["update"]["content"]["text"][:8]) for u in updates]
    assert numbers == list(range(200))


def test_unknown_methods_and_fields_are_forwarded(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(proxy_block() + script_agent_block("--record", str(record)))
    peer = conductor(chain)
    start_session(peer)
    params = {"surprise": {"deep": [1, {"x": None}]}, "_meta": {"k": "v"}}
    peer.request(4, "_test/echo", params)
    _, response = peer.response(4)
    assert response["result"]["params"] == params
    peer.notify("_vendor/notice", {"what": "ever"})
    peer.request(5, "_test/echo", {})
    peer.response(5)
    notes = [m for m in read_jsonl(record) if m.get("method") == "_vendor/notice"]
    assert notes and notes[0]["params"] == {"what": "ever"}


def test_proxy_initialize_from_the_editor_is_refused(make_chain, conductor):
    chain = make_chain(script_agent_block())
    peer = conductor(chain)
    peer.request(1, "_proxy/initialize", init_params(1))
    _, response = peer.response(1)
    assert response["error"]["code"] == -32600


def test_requests_before_initialize_are_refused(make_chain, conductor):
    chain = make_chain(script_agent_block())
    peer = conductor(chain)
    peer.request(1, "session/new", {"cwd": "/", "mcpServers": []})
    _, response = peer.response(1)
    assert response["error"]["code"] == -32600 and "initialize" in response["error"]["data"]


def test_malformed_editor_input_gets_parse_error_and_connection_survives(make_chain, conductor):
    chain = make_chain(script_agent_block())
    peer = conductor(chain)
    peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    error = peer.read()
    assert error["id"] is None and error["error"]["code"] == -32700
    start_session(peer)


def test_malformed_component_output_is_dropped(make_chain, conductor):
    chain = make_chain(script_agent_block("--garbage", name="noisy"))
    peer = conductor(chain, "--log-level", "warning")
    start_session(peer)
    peer.request(7, "_test/echo", {"a": 1})
    _, response = peer.response(7)
    assert response["result"]["params"] == {"a": 1}
    assert "noisy" in peer.stderr and "not JSON" in peer.stderr


def test_multi_megabyte_messages_pass_both_ways(make_chain, conductor):
    chain = make_chain(proxy_block() + script_agent_block())
    peer = conductor(chain)
    start_session(peer)
    blob = "b" * (6 * 1024 * 1024)
    peer.request(8, "_test/echo", {"blob": blob})
    _, response = peer.response(8, timeout=30)
    assert response["result"]["params"]["blob"] == blob
    peer.request(9, "_test/big", {"size": 8 * 1024 * 1024})
    _, response = peer.response(9, timeout=30)
    assert len(response["result"]["text"]) == 8 * 1024 * 1024


def test_dialect_plain_proxy_is_answered_in_its_form(make_chain, conductor, tmp_path):
    log = tmp_path / "proxy.jsonl"
    chain = make_chain(proxy_block("--dialect", "plain", "--log", str(log)) + demo_agent_block())
    peer = conductor(chain)
    session = start_session(peer)
    updates, response = peer.prompt(5, session, "hi")
    assert "result" in response and agent_text(updates)
    received = read_jsonl(log)
    wrapped = [m["method"] for m in received if "successor" in m.get("method", "")]
    assert wrapped and set(wrapped) == {"proxy/successor"}


def test_dialect_auto_falls_back_to_proxy_initialize(make_chain, conductor, tmp_path):
    log = tmp_path / "proxy.jsonl"
    chain = make_chain(proxy_block("--reject-underscore", "--log", str(log)) + demo_agent_block())
    peer = conductor(chain)
    start_session(peer)
    methods = [m.get("method") for m in read_jsonl(log)]
    assert methods[:2] == ["_proxy/initialize", "proxy/initialize"]


def test_dialect_underscore_does_not_fall_back(make_chain, conductor):
    chain = make_chain(
        proxy_block("--reject-underscore", dialect="underscore") + demo_agent_block()
    )
    peer = conductor(chain)
    peer.request(1, "initialize", init_params(1))
    _, response = peer.response(1)
    assert response["error"]["code"] == -32601


def test_component_stderr_is_forwarded_with_its_name(make_chain, conductor):
    chain = make_chain(script_agent_block("--stderr", "warming up", name="chatty"))
    peer = conductor(chain)
    start_session(peer)
    peer.close_stdin()
    assert peer.wait() == 0
    assert "[chatty] warming up" in peer.stderr


def test_stdout_carries_only_json_rpc(make_chain, conductor):
    chain = make_chain(proxy_block("--stderr-hello") + script_agent_block("--stderr", "noise"))
    peer = conductor(chain, "--log-level", "debug")
    start_session(peer)
    peer.close_stdin()
    peer.wait()
    while True:
        line = peer.lines.get(timeout=5)
        if line is None:
            break
        json.loads(line)


def test_invalid_envelopes_get_the_conductors_own_error(make_chain, conductor):
    """Play the parent conductor of a proxy-mode chain and send it broken envelopes."""
    chain = make_chain(proxy_block(name="only"))
    peer = conductor(chain)
    peer.request(1, "_proxy/initialize", {"protocolVersion": 1})
    envelope = peer.read()
    peer.send({"jsonrpc": "2.0", "id": envelope["id"], "result": {"protocolVersion": 1}})
    peer.response(1)
    for i, params in enumerate([{"params": {}}, {"method": 5}, {"method": "x", "params": 3}]):
        peer.request(f"bad{i}", "_proxy/successor", params)
        _, response = peer.response(f"bad{i}")
        assert response["error"]["message"] == "Invalid successor envelope"
        assert response["error"]["data"]["component"] == "successor"
    peer.request("init", "_proxy/successor", {"method": "_proxy/initialize", "params": {}})
    _, response = peer.response("init")
    assert response["error"]["code"] == -32600


def test_older_draft_proxies_run_with_dialect_legacy(make_chain, conductor, tmp_path):
    """The draft @thinkwell/conductor speaks: initialize + _meta.proxy, successor/request|notification."""
    log, record = tmp_path / "proxy.jsonl", tmp_path / "agent.jsonl"
    chain = make_chain(
        proxy_block("--dialect", "legacy", "--log", str(log), dialect="legacy")
        + demo_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    peer.request(0, "initialize", {**init_params(1), "_meta": {"editor": 1}})
    _, response = peer.response(0)
    assert response["result"]["protocolVersion"] == 1
    assert "_meta" not in response["result"], "the proxy's acceptance of its role is hop-local"
    session = start_session_after_init(peer)
    peer.request(5, "session/prompt", prompt_params(session, "ask permission"))
    _, request = peer.read_until(lambda m: m.get("method") == "session/request_permission")
    peer.send(
        {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
        }
    )
    updates, response = peer.response(5)
    assert response["result"]["stopReason"] == "end_turn" and "granted" in agent_text(updates)
    received = read_jsonl(log)
    assert received[0]["method"] == "initialize"
    assert received[0]["params"]["_meta"] == {"editor": 1, "proxy": True}
    wrapped = {m["method"] for m in received if "successor" in m.get("method", "")}
    assert wrapped == {"_proxy/successor/request", "_proxy/successor/notification"}
    agent_init = read_jsonl(record)[0]
    assert agent_init["params"]["_meta"] == {"editor": 1}


def test_legacy_proxy_must_accept_its_role(make_chain, conductor):
    chain = make_chain(proxy_block(dialect="legacy") + demo_agent_block())
    peer = conductor(chain)
    peer.request(0, "initialize", init_params(1))
    _, response = peer.response(0)
    assert response["error"]["code"] == -32600 and "proxy role" in response["error"]["message"]


def start_session_after_init(peer) -> str:
    peer.request(1, "session/new", {"cwd": "/tmp", "mcpServers": []})
    _, response = peer.response(1)
    return str(response["result"]["sessionId"])
