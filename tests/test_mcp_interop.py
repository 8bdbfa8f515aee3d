"""MCP over ACP with peers nobody here wrote: the official TypeScript SDKs.

- `@modelcontextprotocol/sdk` 1.x (a handshake-era MCP client, as most agents
  embed) reaches a plugin's tools through the polyfill, over HTTP and stdio.
- The ACP SDK's `McpOverAcpProvider`, in an editor, provides a server that the
  agent's MCP client (the official Python one) reaches through the conductor
  and the polyfill.
- The ACP SDK's `McpOverAcpCaller`, in a native agent, calls a plugin's tools
  with `mcp/message`; the polyfill sees the native support and stays out of it.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import (
    PY,
    ROOT,
    Peer,
    agent_text,
    declarations,
    plugin_block,
    polyfill_block,
    run_mcp_client,
    script_agent_block,
    start_session,
)
from test_ts_interop import node

INTEROP = ROOT / "tests" / "interop"


def run_ts_mcp_client(declaration, tool, arguments):
    done = subprocess.run(
        [
            node(),
            str(INTEROP / "mcp_ts_client.mjs"),
            json.dumps(declaration),
            tool,
            json.dumps(arguments),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, (lines, done.stderr[-3000:])
    return lines


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_ts_mcp_client_reaches_plugin_tools(polyfilled, transport):
    flags = ["--mcp-http"] if transport == "http" else []
    _peer, record, _, _ = polyfilled(*flags)
    [declared] = declarations(record)
    server, tools, called = run_ts_mcp_client(declared, "add", {"a": 20, "b": 22})
    assert server["server"] == {"name": "toolbox", "version": "1"}  # from server/discover
    if transport == "http":
        assert server["protocolVersion"] == "2025-11-25"
    assert "echo" in [t["name"] for t in tools["tools"]]
    assert called["result"]["structuredContent"] == {"sum": 42}
    assert "resultType" not in called["result"]  # 2026-only members are kept from old clients


def test_ts_provider_in_the_editor_reached_by_the_agents_mcp_client(make_chain, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(polyfill_block() + script_agent_block("--record", str(record), name="agent"))
    editor = Peer(
        [
            node(),
            str(INTEROP / "ts_mcp_editor.mjs"),
            "--",
            PY,
            "-m",
            "conductor",
            "run",
            str(chain),
        ],
        cwd=ROOT,
    )
    try:
        editor.read_until(lambda m: m.get("event") == "ready")
        [declared] = declarations(record)
        assert declared["name"] == "ts-tools" and "command" in declared  # rewritten to stdio
        for mode in ("legacy", "2026-07-28"):
            steps = [["list"], ["progress", "shout", {"text": "hi"}]]
            _, listed, shouted = run_mcp_client(mode, declared, steps)
            assert [t["name"] for t in listed["tools"]] == ["shout"]
            assert shouted["call"]["text"] == ["HI"]
            assert shouted["progress"] == [[1.0, 1.0, None]]
        editor.close_stdin()
        assert editor.wait() == 0
        served = [json.loads(line) for line in editor.lines.queue if line]
    finally:
        editor.kill()
    calls = [m for m in served if m.get("method") == "tools/call"]
    assert len(calls) == 2
    # The legacy client's handshake became the 2026 envelope the provider insists on.
    assert all(m["protocolVersion"] == "2026-07-28" for m in calls)
    assert all(m["clientInfo"]["name"] == "mcp" for m in calls)


def test_ts_caller_agent_calls_plugin_tools_natively(make_chain, conductor):
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Toolbox", "inprocess", "tools")
        + polyfill_block()
        + f'[agent]\nname = "ts"\ncommand = ["{node()}", "{INTEROP / "ts_mcp_agent.mjs"}"]\n'
    )
    peer = conductor(chain)
    session = start_session(peer)

    def ask(request_id, text):
        updates, response = peer.prompt(request_id, session, text)
        assert response["result"]["stopReason"] == "end_turn", response
        return json.loads(agent_text(updates))

    discovered = ask(10, "server/discover {}")["outcome"]["result"]
    assert discovered["supportedVersions"] == ["2026-07-28"]
    counted = ask(
        11, 'tools/call {"name":"countdown","arguments":{"steps":2},"_meta":{"progressToken":"t"}}'
    )
    assert counted["outcome"]["result"]["content"] == [{"type": "text", "text": "done"}]
    assert [n["params"]["progress"] for n in counted["notifications"]] == [1, 2]
    who = ask(12, 'tools/call {"name":"whoami","arguments":{}}')
    assert who["outcome"]["result"]["content"][0]["text"].startswith(
        "session ts-1, call 1, client ts-mcp-agent"
    )
    unknown = ask(13, 'tools/call {"name":"nope","arguments":{}}')
    assert unknown["outcome"]["error"]["code"] == -32602
