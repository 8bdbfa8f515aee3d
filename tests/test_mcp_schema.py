"""What the MCP-over-ACP features put on the wire is valid against the official schemas.

Checked: the `acp` declarations a plugin adds, the `mcp/message` responses and
notifications its tools send (MessageMcpResponse, MessageMcpNotification), the
declarations the polyfill rewrites (McpServerHttp, McpServerStdio, v1 and v2)
and the capabilities it advertises to the editor.
"""

from __future__ import annotations

import json

import pytest
from conftest import (
    ROOT,
    init_params,
    plugin_block,
    polyfill_block,
    prompt_params,
    read_jsonl,
    script_agent_block,
)
from schema_check import AGENT, CLIENT, validator

TOOLBOX = plugin_block("tests.fixtures.plugins:Toolbox", "inprocess", "tools")
CALLS = [
    {"method": "server/discover"},
    {"method": "tools/list"},
    {"method": "ping"},
    {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}},
    {"method": "tools/call", "params": {"name": "add", "arguments": {"a": 1}}},
    {"method": "tools/call", "params": {"name": "boom", "arguments": {}}},
    {"method": "tools/call", "params": {"name": "nope", "arguments": {}}},
    {"method": "tools/call", "params": {"name": "countdown"}, "meta": {"progressToken": 7}},
    {"method": "tools/list", "version": "2025-06-18"},
    {"serverId": "nobody", "method": "tools/list"},
]


def _editor_session(peer, version: int):
    """initialize + session/new from the editor, validating what comes back to it."""
    check = validator(version)
    peer.request(0, "initialize", init_params(version))
    check.record(
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init_params(version)}, CLIENT
    )
    _, init = peer.response(0)
    check.check_message(init, AGENT)
    new_params = {"cwd": "/tmp", "mcpServers": []}
    peer.request(1, "session/new", new_params)
    check.record({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new_params}, CLIENT)
    _, new = peer.response(1)
    check.check_message(new, AGENT)
    return init["result"], new["result"]["sessionId"]


def _validate_what_the_agent_got(record, version: int) -> list[str]:
    check = validator(version)
    used = []
    for message in read_jsonl(record):
        if "method" not in message and isinstance(message.get("id"), int) and message["id"] >= 1000:
            check.remember(message["id"], "mcp/message", AGENT)  # the script agent's own request
        used += check.check_message(message, CLIENT)
    return used


@pytest.mark.parametrize("version", [1, 2])
def test_tool_traffic_is_schema_valid(make_chain, conductor, tmp_path, version):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(TOOLBOX + script_agent_block("--record", str(record), name="agent"))
    peer = conductor(chain)
    _, session = _editor_session(peer, version)
    for n, spec in enumerate(CALLS):
        peer.request(
            10 + n, "session/prompt", prompt_params(session, "mcpcall " + json.dumps(spec))
        )
        peer.response(10 + n)
    used = _validate_what_the_agent_got(record, version)
    assert "MessageMcpResponse" in used and "MessageMcpNotification" in used
    assert "NewSessionRequest" in used  # with the McpServerAcp declaration in it


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_polyfill_output_is_schema_valid(make_chain, conductor, tmp_path, version, transport):
    record = tmp_path / "agent.jsonl"
    flags = ["--mcp-http"] if transport == "http" else []
    chain = make_chain(
        TOOLBOX
        + polyfill_block()
        + script_agent_block("--record", str(record), *flags, name="agent")
    )
    peer = conductor(chain)
    init, _ = _editor_session(peer, version)
    advertised = (
        init["agentCapabilities"]["mcpCapabilities"]["acp"]
        if version == 1
        else init["capabilities"]["session"]["mcp"]["acp"]
    )
    assert advertised == (True if version == 1 else {})
    _validate_what_the_agent_got(record, version)
    [new] = [m for m in read_jsonl(record) if m.get("method") == "session/new"]
    [declared] = new["params"]["mcpServers"]
    assert ("url" in declared) == (transport == "http")


@pytest.mark.parametrize("version", [1, 2])
def test_demo_tool_turn_is_schema_valid(conductor, version):
    """chains/mcp-tools.toml: the demo agent's tool call updates, as the editor gets them."""
    peer = conductor(ROOT / "chains" / "mcp-tools.toml")
    _, session = _editor_session(peer, version)
    check = validator(version)
    params = prompt_params(session, 'use tool word_count {"text":"a b"}')
    peer.request(5, "session/prompt", params)
    check.record({"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": params}, CLIENT)
    updates, response = peer.response(5)
    kinds = []
    for message in [*updates, response]:
        check.check_message(message, AGENT)
        if message.get("method") == "session/update":
            kinds.append(message["params"]["update"]["sessionUpdate"])
    assert ("tool_call" if version == 1 else "tool_call_update") in kinds
    assert kinds.count("tool_call_update") >= 1
