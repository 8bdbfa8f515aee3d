"""MCP over ACP (spec section 4), in memory: `mcp/message` goes straight to whoever first
declared the serverId, notifications back to the consumer, cancels to the provider."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from memory import MemoryChain, settle

from conductor.plugin import Call, ToolCall, ToolError, tool

CANCEL = "$/cancel_request"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _server(server_id: str, name: str = "tools") -> dict[str, Any]:
    return {"type": "acp", "name": name, "serverId": server_id}


def _mcp(server_id: str, request_id: str, method: str = "tools/list", **params: Any) -> Any:
    message: dict[str, Any] = {"serverId": server_id, "requestId": request_id, "method": method}
    if params:
        message["params"] = params
    return message


def _session(chain: MemoryChain, method: str = "session/new", servers: Any = ()) -> None:
    """The editor opens a session declaring `servers`; byte proxies pass it on."""
    chain.editor.request("s", method, {"cwd": "/", "sessionId": "s1", "mcpServers": list(servers)})
    chain.relay()
    [setup] = chain["agent"].take()
    chain["agent"].respond(setup["id"], {"sessionId": "s1"})
    chain.relay()
    [answer] = chain.editor.take()
    assert answer["result"] == {"sessionId": "s1"}, answer


def _chain(*components: Any, servers: Any = (), **kwargs: Any) -> MemoryChain:
    chain = MemoryChain(*components, **kwargs)
    chain.initialize()
    _session(chain, servers=servers)
    return chain


# ------------------------------------------------------------------ providers


@pytest.mark.parametrize(
    "method", ["session/new", "session/load", "session/resume", "session/fork"]
)
def test_the_editors_server_is_learned_from_every_session_setup(method: str) -> None:
    chain = MemoryChain("proxy", "agent")
    chain.initialize()
    _session(chain, method, [_server("ed-tools")])
    chain["agent"].request(5, "mcp/message", _mcp("ed-tools", "r1"))
    assert chain["proxy"].take() == [], "straight to the provider, past the proxy"
    [call] = chain.editor.take()
    assert call["method"] == "mcp/message"
    assert call["params"] == _mcp("ed-tools", "r1")


def test_servers_are_not_learned_from_other_methods() -> None:
    chain = _chain("agent")
    chain.editor.request(2, "_vendor/x", {"mcpServers": [_server("sneaky")]})
    [request] = chain["agent"].take()
    chain["agent"].respond(request["id"], {})
    chain.editor.take()
    chain["agent"].request(5, "mcp/message", _mcp("sneaky", "r1"))
    [answer] = chain["agent"].take()
    assert answer["error"]["code"] == -33001


def test_only_acp_declarations_are_learned() -> None:
    chain = _chain(
        "agent",
        servers=[{"type": "http", "name": "h", "serverId": "http-1", "url": "http://x"}],
    )
    chain["agent"].request(5, "mcp/message", _mcp("http-1", "r1"))
    [answer] = chain["agent"].take()
    assert answer["error"]["code"] == -33001


def test_request_to_the_editors_server_keeps_request_id_and_gets_a_hop_local_id() -> None:
    chain = _chain("p1:proxy", "p2:proxy", "agent", servers=[_server("ed-tools")])
    chain["agent"].send_raw(
        b'{"jsonrpc":"2.0","id":"a-1","method":"mcp/message","params":{"serverId":"ed-tools",'
        b'"requestId":"r-1","method":"tools/call","params":{"n":1.50}}}'
    )
    assert chain["p1"].take() == [] and chain["p2"].take() == []
    [line] = chain.editor.take_raw()
    call = json.loads(line)
    assert call["id"] != "a-1" and type(call["id"]) is int
    assert line.endswith(
        b'"params":{"serverId":"ed-tools","requestId":"r-1","method":"tools/call",'
        b'"params":{"n":1.50}}}'
    )
    result = b'{"result":{"tools":[],"big":123456789012345678901234567890}}'
    chain.editor.send_raw(b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (call["id"], result))
    assert chain["agent"].take_raw() == [b'{"jsonrpc":"2.0","id":"a-1","result":' + result + b"}"]


def test_the_providers_error_reaches_the_consumer_as_it_answered() -> None:
    chain = _chain("proxy", "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("ed", "r1"))
    [call] = chain.editor.take()
    error = {"code": -32800, "message": "Request cancelled"}
    chain.editor.send({"jsonrpc": "2.0", "id": call["id"], "error": error})
    assert chain["agent"].take() == [{"jsonrpc": "2.0", "id": 5, "error": error}]


def test_first_declarer_wins() -> None:
    chain = MemoryChain("proxy", "agent")
    chain.initialize()
    chain.editor.request("s", "session/new", {"cwd": "/", "mcpServers": [_server("dup")]})
    [new] = chain["proxy"].take()
    # The proxy passes the editor's declaration on and adds its own for the same id.
    chain["proxy"].successor(
        new["id"], "session/new", {"cwd": "/", "mcpServers": [_server("dup"), _server("dup")]}
    )
    [setup] = chain["agent"].take()
    chain["agent"].respond(setup["id"], {"sessionId": "s1"})
    chain.relay()
    chain.editor.take()
    chain["agent"].request(5, "mcp/message", _mcp("dup", "r1"))
    assert chain["proxy"].take() == []
    assert [m["method"] for m in chain.editor.take()] == ["mcp/message"]


def test_a_proxys_server_gets_requests_from_the_agent_wrapped() -> None:
    chain = MemoryChain("tooler:proxy", "agent")
    chain.initialize()
    chain.editor.request("s", "session/new", {"cwd": "/", "mcpServers": []})
    [new] = chain["tooler"].take()
    chain["tooler"].successor(new["id"], "session/new", {"cwd": "/", "mcpServers": [_server("px")]})
    [setup] = chain["agent"].take()
    assert setup["params"]["mcpServers"] == [_server("px")]
    chain["agent"].respond(setup["id"], {"sessionId": "s1"})
    chain.relay()
    chain.editor.take()
    chain["agent"].request("a", "mcp/message", _mcp("px", "r1"))
    [call] = chain["tooler"].take()
    assert call["method"] == "_proxy/successor"
    assert call["params"] == {"method": "mcp/message", "params": _mcp("px", "r1")}
    # Its notification for the open request, plain toward... the agent: it is the consumer.
    chain["tooler"].notify("mcp/message", _mcp("px", "r1", "notifications/progress", progress=1))
    assert chain.editor.take() == []
    [note] = chain["agent"].take()
    assert note["params"] == _mcp("px", "r1", "notifications/progress", progress=1)
    chain["tooler"].respond(call["id"], {"result": {"ok": True}})
    assert chain["agent"].take() == [
        {"jsonrpc": "2.0", "id": "a", "result": {"result": {"ok": True}}}
    ]


def test_the_editor_may_consume_a_proxys_server() -> None:
    chain = MemoryChain("tooler:proxy", "agent")
    chain.initialize()
    chain.editor.request("s", "session/new", {"cwd": "/", "mcpServers": []})
    [new] = chain["tooler"].take()
    chain["tooler"].successor(new["id"], "session/new", {"cwd": "/", "mcpServers": [_server("px")]})
    chain["agent"].take()
    chain.editor.request("e", "mcp/message", _mcp("px", "r9"))
    [call] = chain["tooler"].take()
    assert call["method"] == "mcp/message" and call["params"] == _mcp("px", "r9")
    chain["tooler"].respond(call["id"], {"result": {}})
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": "e", "result": {"result": {}}}]


# -------------------------------------------------------------- notifications


def test_provider_notifications_go_to_the_consumer_with_the_request_open() -> None:
    chain = _chain("proxy", "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("ed", "r1", "tools/call"))
    [call] = chain.editor.take()
    for n in range(3):
        chain.editor.notify("mcp/message", _mcp("ed", "r1", "notifications/progress", n=n))
    assert chain["proxy"].take() == []
    chain.editor.respond(call["id"], {"result": {}})
    got = chain["agent"].take()
    assert [m.get("params", {}).get("params", {}).get("n") for m in got] == [0, 1, 2, None]
    assert all(m["params"]["requestId"] == "r1" for m in got[:3])
    assert got[3]["id"] == 5


def test_consumer_notifications_go_to_the_provider() -> None:
    chain = _chain("proxy", "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("ed", "r1", "tools/call"))
    chain.editor.take()
    chain["agent"].notify("mcp/message", _mcp("ed", "r1", "notifications/cancelled"))
    assert chain["proxy"].take() == []
    assert chain.editor.take() == [
        {
            "jsonrpc": "2.0",
            "method": "mcp/message",
            "params": _mcp("ed", "r1", "notifications/cancelled"),
        }
    ]


def test_a_provider_notification_after_the_request_closed_is_not_echoed_back() -> None:
    """With no consumer waiting, the provider's late notification has nobody to go to; it
    must not come back to the provider that sent it."""
    chain = _chain("agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("ed", "r1"))
    [call] = chain.editor.take()
    chain.editor.respond(call["id"], {"result": {}})
    chain["agent"].take()
    chain.editor.notify("mcp/message", _mcp("ed", "r1", "notifications/progress"))
    assert chain.editor.take() == []


def test_notification_for_an_unknown_server_is_dropped() -> None:
    chain = _chain("agent", servers=[_server("ed")])
    chain["agent"].notify("mcp/message", _mcp("nobody", "r1", "notifications/progress"))
    assert chain.editor.take() == [] and chain["agent"].take() == []


# ---------------------------------------------------------- unknown, cancelled


def test_unknown_server_id_is_answered_minus_33001_naming_it() -> None:
    chain = _chain("proxy", "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("nobody-tools", "r1"))
    [answer] = chain["agent"].take()
    assert answer["id"] == 5
    assert answer["error"]["code"] == -33001
    assert answer["error"]["data"]["serverId"] == "nobody-tools"
    assert "nobody-tools" in answer["error"]["message"]
    assert chain.editor.take() == [] and chain["proxy"].take() == []


@pytest.mark.parametrize("server_id", [None, 5, ["x"]])
def test_a_missing_or_non_string_server_id_is_answered(server_id: Any) -> None:
    chain = _chain("agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", {"serverId": server_id, "requestId": "r"})
    [answer] = chain["agent"].take()
    assert answer["error"]["code"] == -33001


def test_unknown_server_from_the_editor_is_answered_minus_33001() -> None:
    chain = _chain("agent")
    chain.editor.request("e", "mcp/message", _mcp("nobody", "r1"))
    [answer] = chain.editor.take()
    assert answer["id"] == "e" and answer["error"]["code"] == -33001


def test_cancel_of_an_mcp_request_is_translated_to_the_provider() -> None:
    chain = _chain("proxy", "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("ed", "r1", "tools/call"))
    [call] = chain.editor.take()
    chain["agent"].notify(CANCEL, {"requestId": 5})
    assert chain["proxy"].take() == []
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "method": CANCEL, "params": {"requestId": call["id"]}}
    ]
    chain.editor.fail(call["id"], -32800, "Request cancelled")
    [answer] = chain["agent"].take()
    assert answer["id"] == 5 and answer["error"]["code"] == -32800


def test_the_same_request_id_reopened_after_its_answer_routes_again() -> None:
    chain = _chain("agent", servers=[_server("ed")])
    for outer in (5, 6):
        chain["agent"].request(outer, "mcp/message", _mcp("ed", "r1"))
        [call] = chain.editor.take()
        chain.editor.notify("mcp/message", _mcp("ed", "r1", "notifications/progress"))
        chain.editor.respond(call["id"], {"result": {}})
        got = chain["agent"].take()
        assert [m.get("id") for m in got] == [None, outer]


# ---------------------------------------------------------------- plugins


class ProvidesTools:
    """A plugin providing a server by hand: declared on session/new, served on mcp/message."""

    server = _server("plugin-tools")

    def on_session_new(self, call: Call) -> None:
        call.params.setdefault("mcpServers", []).append(dict(self.server))

    def on_mcp_message(self, call: Call) -> None:
        params = call.params
        call.ctx.notify_agent(
            "mcp/message",
            _mcp(params["serverId"], params["requestId"], "notifications/progress", p=1),
        )
        call.respond({"result": {"answered": params["method"]}})


def test_a_plugins_server_is_answered_by_the_plugin() -> None:
    chain = _chain(ProvidesTools(), "proxy", "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("plugin-tools", "r1", "tools/call"))
    assert chain["proxy"].take() == [], "addressed to the plugin: the proxy between is skipped"
    got = chain["agent"].take()
    assert got == [
        {
            "jsonrpc": "2.0",
            "method": "mcp/message",
            "params": _mcp("plugin-tools", "r1", "notifications/progress", p=1),
        },
        {"jsonrpc": "2.0", "id": 5, "result": {"result": {"answered": "tools/call"}}},
    ]
    assert chain.editor.take() == []


def test_a_plugin_between_is_not_visited_by_an_mcp_message_for_the_editor() -> None:
    seen: list[str] = []

    class Watches:
        def on_mcp_message(self, call: Call) -> None:
            seen.append(call.method)

    chain = _chain(Watches(), "agent", servers=[_server("ed")])
    chain["agent"].request(5, "mcp/message", _mcp("ed", "r1"))
    [call] = chain.editor.take()
    chain.editor.respond(call["id"], {"result": {}})
    assert chain["agent"].take()[0]["id"] == 5
    assert seen == []


class Tools:
    mcp_server_name = "box"

    @tool
    async def echo(self, text: str) -> str:
        """Repeat the text."""
        return text

    @tool
    async def count(self, call: ToolCall, steps: int = 2) -> str:
        """Report progress, then finish."""
        for step in range(steps):
            call.progress(step + 1, total=steps)
            await trio.sleep(0)
        return f"counted in {call.session_id}"

    @tool
    async def refuse(self) -> str:
        """Fails in its own words."""
        raise ToolError("not now")

    @tool
    async def hang(self) -> str:
        """Waits until cancelled."""
        await trio.sleep_forever()
        return "never"


async def _tool_chain(nursery: trio.Nursery) -> tuple[MemoryChain, str]:
    chain = MemoryChain(Tools(), "agent", nursery=nursery)
    chain.initialize()
    chain.editor.request("s", "session/new", {"cwd": "/", "mcpServers": []})
    await settle()
    [setup] = chain["agent"].take()
    [declared] = setup["params"]["mcpServers"]
    assert declared["type"] == "acp" and declared["name"] == "box"
    chain["agent"].respond(setup["id"], {"sessionId": "s1"})
    await settle()
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": "s", "result": {"sessionId": "s1"}}]
    return chain, declared["serverId"]


def _tool_call(name: str, meta: dict[str, Any] | None = None, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "_meta": {**MCP_META, **(meta or {})}}


async def test_tool_plugin_declares_its_server_and_lists_its_tools(nursery: trio.Nursery) -> None:
    chain, server_id = await _tool_chain(nursery)
    chain["agent"].request(5, "mcp/message", _mcp(server_id, "r1", "tools/list", _meta=MCP_META))
    await settle()
    [answer] = chain["agent"].take()
    names = [t["name"] for t in answer["result"]["result"]["tools"]]
    assert names == ["echo", "count", "refuse", "hang"]


async def test_tool_plugin_answers_tools_call(nursery: trio.Nursery) -> None:
    chain, server_id = await _tool_chain(nursery)
    chain["agent"].request(
        5, "mcp/message", _mcp(server_id, "r1", "tools/call", **_tool_call("echo", text="hi"))
    )
    await settle()
    [answer] = chain["agent"].take()
    result = answer["result"]["result"]
    assert result["content"] == [{"type": "text", "text": "hi"}] and result["isError"] is False
    chain["agent"].request(
        6, "mcp/message", _mcp(server_id, "r2", "tools/call", **_tool_call("refuse"))
    )
    await settle()
    [answer] = chain["agent"].take()
    assert answer["result"]["result"]["isError"] is True
    assert answer["result"]["result"]["content"][0]["text"] == "not now"


async def test_tool_progress_reaches_the_consumer_before_the_result(nursery: trio.Nursery) -> None:
    chain, server_id = await _tool_chain(nursery)
    params = _tool_call("count", {"progressToken": "tok"}, steps=3)
    chain["agent"].request(5, "mcp/message", _mcp(server_id, "r1", "tools/call", **params))
    await settle()
    got = chain["agent"].take()
    assert [m.get("params", {}).get("method") for m in got[:3]] == ["notifications/progress"] * 3
    assert all(m["params"]["requestId"] == "r1" for m in got[:3])
    assert got[3]["id"] == 5
    assert got[3]["result"]["result"]["content"][0]["text"] == "counted in s1"


async def test_cancelling_a_tool_call_cancels_the_tool(nursery: trio.Nursery) -> None:
    chain, server_id = await _tool_chain(nursery)
    chain["agent"].request(
        5, "mcp/message", _mcp(server_id, "r1", "tools/call", **_tool_call("hang"))
    )
    await settle()
    assert chain["agent"].take() == []
    chain["agent"].notify(CANCEL, {"requestId": 5})
    await settle()
    [answer] = chain["agent"].take()
    assert answer["id"] == 5 and answer["error"]["code"] == -32800


async def test_traffic_goes_on_while_a_tool_runs(nursery: trio.Nursery) -> None:
    chain, server_id = await _tool_chain(nursery)
    chain["agent"].request(
        5, "mcp/message", _mcp(server_id, "r1", "tools/call", **_tool_call("hang"))
    )
    chain["agent"].notify("session/update", {"sessionId": "s1"})
    await settle()
    assert chain.editor.take() == [
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1"}}
    ]


async def test_a_tool_servers_unknown_method_is_an_inner_error(nursery: trio.Nursery) -> None:
    chain, server_id = await _tool_chain(nursery)
    chain["agent"].request(5, "mcp/message", _mcp(server_id, "r1", "nope/x", _meta=MCP_META))
    await settle()
    [answer] = chain["agent"].take()
    assert answer["result"]["error"]["code"] == -32601
