"""The MCP-over-ACP polyfill, with the official Python MCP client as the agent's MCP client.

The chain is Toolbox (a plugin offering tools over ACP) -> polyfill -> script
agent. The agent records the declarations it receives; the test then points
the `mcp` package's client (tests/peers/mcp_py_client.py, a subprocess) at
them, in each of its modes, over HTTP and over the stdio bridge.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import (
    agent_text,
    declarations,
    plugin_block,
    polyfill_block,
    run_mcp_client,
    script_agent_block,
    start_session,
)

STEPS = [
    ["list"],
    ["call", "echo", {"text": "hi"}],
    ["call", "add", {"a": 2, "b": 40}],
    ["call", "boom", {}],
    ["progress", "countdown", {}],
]


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("mode", ["2026-07-28", "legacy", "auto"])
def test_real_mcp_client_reaches_plugin_tools(polyfilled, transport, mode):
    flags = ["--mcp-http"] if transport == "http" else []
    _peer, record, init, _ = polyfilled(*flags)
    assert init["agentCapabilities"]["mcpCapabilities"]["acp"] is True  # advertised upstream
    [declared] = declarations(record)
    assert declared["name"] == "toolbox"
    if transport == "http":
        assert declared["type"] == "http"
        assert urlsplit(declared["url"]).hostname == "127.0.0.1"
        [auth] = declared["headers"]
        assert auth["name"] == "Authorization" and len(auth["value"]) > 40
    else:
        assert "type" not in declared  # v1 stdio declarations are untagged
        assert Path(declared["command"]).is_absolute()
    negotiated, listed, echo, add, boom, slow = run_mcp_client(mode, declared, STEPS)
    assert negotiated["negotiated"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert [t["name"] for t in listed["tools"]][:4] == ["echo", "add", "whoami", "countdown"]
    assert echo["call"] == {"isError": False, "text": ["hi"], "structured": None}
    assert add["call"]["structured"] == {"sum": 42}
    assert boom["call"]["isError"] is True
    assert boom["call"]["text"] == ["boom failed: ValueError: kaboom"]
    assert slow["call"]["text"] == ["done"]
    assert slow["progress"] == [[1.0, 2.0, "step 1"], [2.0, 2.0, "step 2"]]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_client_cancel_reaches_the_tool(polyfilled, tmp_path, transport):
    flags = ["--mcp-http"] if transport == "http" else []
    peer, record, _, _ = polyfilled(*flags)
    [declared] = declarations(record)
    mode = "2026-07-28" if transport == "http" else "legacy"  # hang-up vs notifications/cancelled
    [_, cancelled] = run_mcp_client(mode, declared, [["cancel", "slow", {"steps": 1}]])
    assert cancelled == {"cancelled": True}
    # The tool saw trio cancellation: its cleanup ran.
    peer.read_until(lambda m: m.get("method") == "_test/cancelled", timeout=15)


def test_v2_agent_gets_typed_stdio_and_editor_sees_v2_capability(polyfilled):
    _peer, record, init, _ = polyfilled(version=2)
    assert init["capabilities"]["session"]["mcp"]["acp"] == {}
    [declared] = declarations(record)
    assert declared["type"] == "stdio"
    [_negotiated, echo] = run_mcp_client("auto", declared, [["call", "echo", {"text": "v2"}]])
    assert echo["call"]["text"] == ["v2"]


def test_native_agent_is_left_alone(polyfilled):
    peer, record, init, session = polyfilled("--mcp-acp")
    assert init["agentCapabilities"]["mcpCapabilities"] == {"acp": True}
    [declared] = declarations(record)
    assert declared["type"] == "acp" and declared["name"] == "toolbox"
    # The agent calls the plugin's server natively; the polyfill is not in the way.
    spec = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "native"}}}
    peer.request(
        5,
        "session/prompt",
        {"sessionId": session, "prompt": [{"type": "text", "text": "mcpcall " + json.dumps(spec)}]},
    )
    updates, response = peer.response(5)
    assert response["result"]["stopReason"] == "end_turn"
    assert '"content": [{"type": "text", "text": "native"}]' in agent_text(updates)


def test_other_declarations_pass_untouched(make_chain, conductor, tmp_path):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(polyfill_block() + script_agent_block("--record", str(record), name="agent"))
    peer = conductor(chain)
    start_session(peer)
    stdio = {"name": "files", "command": "/bin/true", "args": [], "env": []}
    http_server = {"type": "http", "name": "web", "url": "http://example.test/mcp", "headers": []}
    editor_acp = {"type": "acp", "name": "editor", "serverId": "ed-1", "_meta": {"x": 1}}
    peer.request(2, "session/new", {"cwd": "/tmp", "mcpServers": [stdio, http_server, editor_acp]})
    peer.response(2)
    got = declarations(record)
    assert got[:2] == [stdio, http_server]
    assert got[2]["name"] == "editor" and got[2]["_meta"] == {"x": 1} and "command" in got[2]


# ------------------------------------------------------------------ security and limits


def _post(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None, method: str = "POST"
):
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    connection.request(method, parts.path, body=body, headers=headers or {})
    reply = connection.getresponse()
    data = reply.read()
    connection.close()
    return reply.status, dict(reply.getheaders()), data


def _modern(method: str, params: dict[str, Any] | None = None) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": meta}}
    ).encode()


def _headers(token: str, method: str, **extra: str) -> dict[str, str]:
    return {
        "Authorization": token,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        **extra,
    }


def test_http_endpoint_refuses_what_it_must(polyfilled):
    _peer, record, _, _ = polyfilled("--mcp-http", max_body_bytes=2000)
    [declared] = declarations(record)
    url, token = declared["url"], declared["headers"][0]["value"]
    ok = _post(url, _modern("tools/list"), _headers(token, "tools/list"))
    assert ok[0] == 200 and json.loads(ok[2])["result"]["resultType"] == "complete"
    assert _post(url, _modern("tools/list"), _headers("Bearer wrong", "tools/list"))[0] == 401
    no_token = _headers(token, "tools/list")
    del no_token["Authorization"]
    status, headers, _ = _post(url, _modern("tools/list"), no_token)
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    foreign = _headers(token, "tools/list", Origin="https://evil.example")
    assert _post(url, _modern("tools/list"), foreign)[0] == 403
    local = _headers(token, "tools/list", Origin="http://localhost:3000")
    assert _post(url, _modern("tools/list"), local)[0] == 200
    assert _post(url + "x", _modern("tools/list"), _headers(token, "tools/list"))[0] == 404
    status, headers, _ = _post(url, None, {"Authorization": token}, method="GET")
    assert status == 405 and headers["Allow"] == "POST"
    big = _modern("tools/call", {"name": "echo", "arguments": {"text": "x" * 5000}})
    assert _post(url, big, _headers(token, "tools/call", **{"Mcp-Name": "echo"}))[0] == 413
    mismatch = _post(url, _modern("tools/list"), _headers(token, "tools/call"))
    assert mismatch[0] == 400 and json.loads(mismatch[2])["error"]["code"] == -32020
    no_name = _post(
        url,
        _modern("tools/call", {"name": "echo", "arguments": {"text": "a"}}),
        _headers(token, "tools/call"),
    )
    assert no_name[0] == 400 and json.loads(no_name[2])["error"]["code"] == -32020
    legacy_without_session = json.dumps(
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    ).encode()
    assert (
        _post(
            url,
            legacy_without_session,
            {"Authorization": token, "Content-Type": "application/json"},
        )[0]
        == 400
    )
    assert _post(url, b"{not json", _headers(token, "tools/list"))[0] == 400


def test_http_endpoint_limits_requests_in_flight(polyfilled):
    peer, record, _, _ = polyfilled("--mcp-http", max_requests=1)
    [declared] = declarations(record)
    url, token = declared["url"], declared["headers"][0]["value"]
    parts = urlsplit(url)
    # One request held open by a tool that never ends...
    held = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    body = _modern("tools/call", {"name": "slow", "arguments": {"steps": 1}})
    held.request(
        "POST", parts.path, body=body, headers=_headers(token, "tools/call", **{"Mcp-Name": "slow"})
    )
    peer.read_until(lambda m: m.get("method") == "_test/slow_started")
    # ...so the next one is turned away.
    status, headers, _ = _post(url, _modern("tools/list"), _headers(token, "tools/list"))
    assert status == 429 and headers["Retry-After"] == "1"
    held.close()  # hanging up cancels the tool
    peer.read_until(lambda m: m.get("method") == "_test/cancelled")
    assert _post(url, _modern("tools/list"), _headers(token, "tools/list"))[0] == 200


def test_bridge_with_a_wrong_token_is_closed(polyfilled):
    _peer, record, _, _ = polyfilled()
    [declared] = declarations(record)
    address = next(e["value"] for e in declared["env"] if e["name"] == "ACP_CONDUCTOR_MCP_ADDRESS")
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(b'{"token": "guess"}\n{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        assert sock.recv(100) == b""  # closed without an answer


def test_non_loopback_bind_is_refused(make_chain, tmp_path):
    chain = make_chain(polyfill_block(bind="0.0.0.0") + script_agent_block(name="agent"))
    done = subprocess.run(
        [sys.executable, "-m", "conductor", "check", str(chain)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "bind '0.0.0.0' refused: MCP endpoints listen on loopback only" in done.stderr


def test_listeners_close_with_the_chain(polyfilled):
    peer, record, _, _ = polyfilled("--mcp-http")
    [declared] = declarations(record)
    parts = urlsplit(declared["url"])
    peer.close_stdin()
    assert peer.wait() == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((parts.hostname, parts.port), timeout=5)


def test_polyfill_and_provider_as_subprocess_proxies(make_chain, conductor, tmp_path):
    """`conductor proxy` runs both plugins standalone; the outer conductor routes between them."""
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Toolbox", "subprocess", "tools")
        + plugin_block("mcp_over_acp", "subprocess", "polyfill")
        + script_agent_block("--record", str(record), "--mcp-http", name="agent")
    )
    peer = conductor(chain)
    start_session(peer)
    [declared] = declarations(record)
    assert declared["type"] == "http"
    steps = [["call", "echo", {"text": "far"}], ["progress", "countdown", {}]]
    _, echo, counted = run_mcp_client("2026-07-28", declared, steps)
    assert echo["call"]["text"] == ["far"]
    assert counted["progress"] == [[1.0, 2.0, "step 1"], [2.0, 2.0, "step 2"]]


def test_bad_clients_do_not_take_the_endpoints_down(polyfilled):
    _peer, record, _, _ = polyfilled("--mcp-http", max_body_bytes=2000)
    [declared] = declarations(record)
    url, token = declared["url"], declared["headers"][0]["value"]
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=15) as sock:
        sock.sendall(b"\x00\x01 this is not HTTP\r\n\r\n")
        sock.recv(100)  # an error status or a plain close; either way the server lives on
    status, _, body = _post(url, _modern("tools/list"), _headers(token, "tools/list"))
    assert status == 200 and b"echo" in body


def test_an_oversized_bridge_line_closes_only_that_bridge(polyfilled):
    _peer, record, _, _ = polyfilled(max_body_bytes=2000)
    [declared] = declarations(record)
    env = {e["name"]: e["value"] for e in declared["env"]}
    host, port = env["ACP_CONDUCTOR_MCP_ADDRESS"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        hello = json.dumps({"token": env["ACP_CONDUCTOR_MCP_TOKEN"]}).encode()
        sock.sendall(hello + b"\n" + b"x" * 5000)
        assert sock.recv(100) == b""
    [_, echo] = run_mcp_client("legacy", declared, [["call", "echo", {"text": "still here"}]])
    assert echo["call"]["text"] == ["still here"]


@pytest.mark.parametrize(
    ("flags", "mode", "expected"),
    [((), "http", "http"), (("--mcp-http",), "stdio", "stdio"), (("--mcp-http",), "auto", "http")],
)
def test_mode_overrides_what_the_agent_advertises(polyfilled, flags, mode, expected):
    _peer, record, _, _ = polyfilled(*flags, mode=mode)
    [declared] = declarations(record)
    assert ("url" in declared) == (expected == "http")
    [_, echo] = run_mcp_client("auto", declared, [["call", "echo", {"text": mode}]])
    assert echo["call"]["text"] == [mode]


def test_a_bad_mode_is_a_chain_error(make_chain):
    chain = make_chain(polyfill_block(mode="carrier-pigeon") + script_agent_block(name="agent"))
    done = subprocess.run(
        [sys.executable, "-m", "conductor", "check", str(chain)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "mode must be one of auto, http, stdio, not 'carrier-pigeon'" in done.stderr
