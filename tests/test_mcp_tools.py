"""MCP tools from plugins: `@tool` methods served over `mcp/message` (MCP 2026-07-28).

The agent is a native consumer here (tests/fixtures/script_agent.py `mcpcall`):
it calls the servers declared to it with raw `mcp/message` requests, so every
outer and inner field can be checked. Real MCP clients meet these tools in
tests/test_mcp_polyfill.py and tests/test_mcp_interop.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from conftest import (
    demo_agent_block,
    plugin_block,
    prompt_params,
    read_jsonl,
    script_agent_block,
    start_session,
)

from conductor.mcp_schema import input_schema

MODES = ["inprocess", "subprocess"]


@pytest.fixture(params=MODES)
def toolbox(request, make_chain, conductor, tmp_path):
    """A running chain: the Toolbox plugin in front of the script agent; returns (peer, record)."""
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Toolbox", request.param, "tools")
        + script_agent_block("--record", str(record), name="agent")
    )
    return conductor(chain), record


def _mcp(peer, session: str, request_id: int, **spec: Any) -> tuple[list[Any], list[str]]:
    """Run one `mcpcall` prompt; return the outer answers and the notification lines."""
    peer.request(
        request_id, "session/prompt", prompt_params(session, "mcpcall " + json.dumps(spec))
    )
    updates, response = peer.response(request_id)
    assert response["result"]["stopReason"] == "end_turn", response
    answers, notes = [], []
    for update in updates:
        if update.get("method") != "session/update":
            continue
        text = update["params"]["update"]["content"]["text"]
        if text.startswith("mcp answer: "):
            answers.append(json.loads(text[len("mcp answer: ") :]))
        else:
            notes.append(text)
    return answers, notes


def _inner(peer, session: str, request_id: int, **spec: Any) -> Any:
    answers, _ = _mcp(peer, session, request_id, **spec)
    assert len(answers) == 1 and "result" in answers[0], answers
    return answers[0]["result"]


def _declared(record) -> list[list[dict[str, Any]]]:
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return [m["params"]["mcpServers"] for m in lines if m.get("method") == "session/new"]


def test_each_session_gets_its_own_declared_server(toolbox):
    peer, record = toolbox
    first = start_session(peer)
    peer.request(2, "session/new", {"cwd": "/tmp", "mcpServers": []})
    second = peer.response(2)[1]["result"]["sessionId"]
    declared = _declared(record)
    assert [[s["type"], s["name"]] for s in declared[0]] == [["acp", "toolbox"]]
    ids = [servers[0]["serverId"] for servers in declared]
    assert len(set(ids)) == 2
    # Each call knows its session, and per-session state is kept apart.
    assert "session s-1, call 1, client script-agent" in json.dumps(
        _inner(peer, first, 10, server=0, method="tools/call", params={"name": "whoami"})
    )
    assert "session s-2, call 1" in json.dumps(
        _inner(peer, second, 11, server=1, method="tools/call", params={"name": "whoami"})
    )
    assert "session s-1, call 2" in json.dumps(
        _inner(peer, first, 12, server=0, method="tools/call", params={"name": "whoami"})
    )


def test_discover_list_and_ping_are_complete_2026_results(toolbox):
    peer, _ = toolbox
    session = start_session(peer)
    discover = _inner(peer, session, 10, method="server/discover")["result"]
    assert discover == {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": False}},
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "toolbox", "version": "1"}},
        "resultType": "complete",
    }
    listed = _inner(peer, session, 11, method="tools/list")["result"]
    assert (listed["resultType"], listed["ttlMs"], listed["cacheScope"]) == (
        "complete",
        0,
        "private",
    )
    tools = {t["name"]: t for t in listed["tools"]}
    assert list(tools) == ["echo", "add", "whoami", "countdown", "slow", "boom", "die", "refuse"]
    assert tools["add"] == {
        "name": "add",
        "description": "Add two integers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
            "required": ["a"],
        },
    }
    assert tools["echo"]["description"] == "Repeat the text."
    assert "call" not in tools["slow"]["inputSchema"]["properties"]
    assert _inner(peer, session, 12, method="ping")["result"] == {"resultType": "complete"}


def test_tool_calls_results_and_tool_errors(toolbox):
    peer, _ = toolbox
    session = start_session(peer)

    def call(request_id: int, name: str, arguments: dict[str, Any]) -> Any:
        params = {"name": name, "arguments": arguments}
        return _inner(peer, session, request_id, method="tools/call", params=params)

    assert call(10, "echo", {"text": "hi"}) == {
        "result": {
            "content": [{"type": "text", "text": "hi"}],
            "isError": False,
            "resultType": "complete",
        }
    }
    added = call(11, "add", {"a": 2, "b": 40})["result"]
    assert added["structuredContent"] == {"sum": 42}
    assert json.loads(added["content"][0]["text"]) == {"sum": 42}
    boom = call(12, "boom", {})["result"]
    assert boom["isError"] is True
    assert boom["content"][0]["text"] == "boom failed: ValueError: kaboom"
    assert call(13, "refuse", {"reason": "not today"})["result"]["content"] == [
        {"type": "text", "text": "not today"}
    ]
    bad = call(14, "add", {"b": 1, "c": 2})["result"]
    assert bad["isError"] is True
    assert bad["content"][0]["text"] == "invalid arguments for add: missing a; unknown c"
    unknown = call(15, "nope", {})
    assert unknown["error"]["code"] == -32602
    assert unknown["error"]["message"] == "Unknown tool: nope"
    assert "kaboom" in peer.stderr  # the tool's traceback goes to stderr, not the wire


def test_inner_envelope_errors(toolbox):
    peer, _ = toolbox
    session = start_session(peer)
    missing = _inner(peer, session, 10, method="tools/list", envelope=False)
    assert missing["error"]["code"] == -32602
    assert "io.modelcontextprotocol/protocolVersion" in missing["error"]["message"]
    old = _inner(peer, session, 11, method="tools/list", version="2025-11-25")
    assert old["error"] == {
        "code": -32022,
        "message": "Unsupported protocol version",
        "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"},
    }
    unknown = _inner(peer, session, 12, method="resources/list")
    assert unknown["error"]["code"] == -32601


def test_progress_reaches_the_caller_and_cancel_stops_the_tool(toolbox):
    peer, _ = toolbox
    session = start_session(peer)
    answers, notes = _mcp(
        peer,
        session,
        10,
        method="tools/call",
        params={"name": "slow", "arguments": {"steps": 2}},
        meta={"progressToken": "tok"},
        cancelAfterNotes=2,
    )
    assert len(notes) == 2 and all("notifications/progress for req-" in n for n in notes), notes
    assert answers == [{"error": {"code": -32800, "message": "Request cancelled"}}]


def test_binding_errors_duplicate_and_too_many(toolbox):
    peer, _ = toolbox
    session = start_session(peer)
    slow = {"name": "slow", "arguments": {"steps": 0}}
    # Two requests with one requestId: the second is refused, then the first is cancelled.
    answers, _ = _mcp(
        peer, session, 10, method="tools/call", params=slow, count=2, requestId="dup", cancel="rest"
    )
    assert [a["error"]["code"] for a in answers] == [-32602, -32800]
    assert "dup" in answers[0]["error"]["message"]
    # 65 at once: the 65th is over the limit; the other 64 are cancelled afterwards.
    answers, _ = _mcp(peer, session, 11, method="tools/call", params=slow, count=65, cancel="rest")
    codes = [a["error"]["code"] for a in answers]
    assert codes[0] == -33000 and codes[1:] == [-32800] * 64


def test_unknown_server_is_an_outer_error(toolbox):
    peer, _ = toolbox
    session = start_session(peer)
    answers, _ = _mcp(peer, session, 10, serverId="nobody", method="tools/list")
    assert answers[0]["error"]["code"] == -33001
    assert answers[0]["error"]["data"]["serverId"] == "nobody"


def test_input_schema_from_signatures():
    async def search(
        self,
        query: str,
        limit: int = 10,
        tags: list[str] | None = None,
        order: Literal["asc", "desc"] = "asc",
        weights: dict[str, float] | None = None,
        either: int | str = 0,
        anything=None,
    ) -> None: ...

    assert input_schema(search, set()) == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "tags": {"type": "array", "items": {"type": "string"}},
            "order": {"enum": ["asc", "desc"], "default": "asc"},
            "weights": {"type": "object", "additionalProperties": {"type": "number"}},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 0},
            "anything": {},
        },
        "required": ["query"],
    }


def test_a_provider_that_dies_fails_its_open_requests(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Toolbox", "subprocess", "tools")
        + script_agent_block("--record", str(record), name="agent")
    )
    peer = conductor(chain)
    session = start_session(peer)
    spec = {"method": "tools/call", "params": {"name": "die", "arguments": {}}}
    _, response = peer.prompt(10, session, "mcpcall " + json.dumps(spec))
    assert "tools" in response["error"]["message"]
    assert peer.wait() == 1
    # The agent's mcp/message was answered with the provider's death, not left hanging.
    answers = [m for m in read_jsonl(record) if m.get("id") == 1000 and "method" not in m]
    assert answers and "exited with status 3" in answers[0]["error"]["message"], answers


def test_every_session_setup_gets_a_declaration(make_chain, conductor, tmp_path):
    """session/resume too (v2 demo agent): the tools follow the session wherever it is opened."""
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Toolbox", "inprocess", "tools")
        + demo_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    session = start_session(peer, version=2)
    peer.request(5, "session/resume", {"sessionId": session, "cwd": "/tmp"})
    _, resumed = peer.response(5)
    assert "result" in resumed, resumed
    setups = [m for m in read_jsonl(record) if m.get("method") in ("session/new", "session/resume")]
    servers = [[s["name"] for s in m["params"]["mcpServers"]] for m in setups]
    assert servers == [["toolbox"], ["toolbox"]]
    ids = {m["params"]["mcpServers"][0]["serverId"] for m in setups}
    assert len(ids) == 2
