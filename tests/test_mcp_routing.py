"""MCP over ACP: `mcp/message` goes straight to whoever declared the serverId."""

from __future__ import annotations

import json

from conftest import agent_text, plugin_block, proxy_block, script_agent_block

EDITOR_SERVER = {"type": "acp", "name": "editor tools", "serverId": "editor-tools"}


def _session(peer, servers):
    peer.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    peer.response(0)
    peer.request(1, "session/new", {"cwd": "/tmp", "mcpServers": servers})
    _, response = peer.response(1)
    return response["result"]["sessionId"]


def _prompt(peer, session, text, request_id):
    peer.request(
        request_id,
        "session/prompt",
        {"sessionId": session, "prompt": [{"type": "text", "text": text}]},
    )


def _chain(make_chain, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        proxy_block(name="p1")
        + plugin_block("tests.fixtures.plugins:ToolProvider", "inprocess", "tools")
        + proxy_block(name="p3")
        + script_agent_block("--record", str(record), name="agent")
    )
    return chain, record


def test_two_providers_in_one_session(make_chain, conductor, tmp_path):
    chain, record = _chain(make_chain, tmp_path)
    peer = conductor(chain)
    session = _session(peer, [EDITOR_SERVER])
    # The agent saw both declarations: the editor's and the proxy's.
    new = next(
        json.loads(line) for line in record.read_text().splitlines() if '"session/new"' in line
    )
    assert [s["serverId"] for s in new["params"]["mcpServers"]] == ["editor-tools", "proxy-tools"]

    # A call to the proxy's server is answered by the proxy; its progress notification reaches the agent.
    _prompt(peer, session, "mcp proxy-tools tools/call", 10)
    updates, response = peer.response(10)
    assert response["result"]["stopReason"] == "end_turn"
    text = agent_text(updates)
    assert "mcp notification: notifications/progress" in text
    assert (
        '"result": {"result": {"content": [{"type": "text", "text": "proxy answered tools/call"}]}}'
        in text
    )

    # A call to the editor's server comes straight to the editor, plain, with serverId and requestId intact.
    _prompt(peer, session, "mcp editor-tools tools/list", 11)
    _, call = peer.read_until(lambda m: m.get("method") == "mcp/message")
    assert call["params"]["serverId"] == "editor-tools" and call["params"]["method"] == "tools/list"
    request_id = call["params"]["requestId"]
    peer.notify(
        "mcp/message",
        {
            "serverId": "editor-tools",
            "requestId": request_id,
            "method": "notifications/progress",
            "params": {"progress": 5},
        },
    )
    peer.send({"jsonrpc": "2.0", "id": call["id"], "result": {"result": {"tools": []}}})
    updates, _response = peer.response(11)
    text = agent_text(updates)
    assert f"mcp notification: notifications/progress for {request_id}" in text
    assert '"result": {"result": {"tools": []}}' in text


def test_unknown_server_is_an_error_naming_it(make_chain, conductor, tmp_path):
    chain, _ = _chain(make_chain, tmp_path)
    peer = conductor(chain)
    session = _session(peer, [EDITOR_SERVER])
    _prompt(peer, session, "mcp nobody-tools tools/list", 10)
    updates, _ = peer.response(10)
    text = agent_text(updates)
    assert '"code": -33001' in text and "nobody-tools" in text


def test_cancel_reaches_the_provider_as_a_hop_local_cancel(make_chain, conductor, tmp_path):
    chain, _ = _chain(make_chain, tmp_path)
    peer = conductor(chain)
    session = _session(peer, [EDITOR_SERVER])
    _prompt(peer, session, "mcp editor-tools tools/call cancel", 10)
    _, call = peer.read_until(lambda m: m.get("method") == "mcp/message")
    _, cancel = peer.read_until(lambda m: m.get("method") == "$/cancel_request")
    assert cancel["params"] == {"requestId": call["id"]}
    peer.send(
        {
            "jsonrpc": "2.0",
            "id": call["id"],
            "error": {"code": -32800, "message": "Request cancelled"},
        }
    )
    updates, _ = peer.response(10)
    assert '"code": -32800' in agent_text(updates)


def test_trace_shows_mcp_operations(make_chain, conductor, tmp_path):
    chain, _ = _chain(make_chain, tmp_path)
    trace = tmp_path / "trace.jsonl"
    peer = conductor(chain, "--trace", str(trace))
    session = _session(peer, [EDITOR_SERVER])
    _prompt(peer, session, "mcp proxy-tools tools/call", 10)
    peer.response(10)
    peer.close_stdin()
    peer.wait()
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    mcp = [
        (e["type"], e["from"], e["to"], e.get("method")) for e in events if e["protocol"] == "mcp"
    ]
    assert mcp == [
        ("request", "agent", "tools", "tools/call"),
        ("notification", "tools", "agent", "notifications/progress"),
        ("response", "tools", "agent", None),
    ]
