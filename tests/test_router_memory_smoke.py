"""Smoke tests of the in-memory harness (tests/memory.py)."""

from __future__ import annotations

from memory import MemoryChain, settle

from conductor.plugin import Call


def test_initialize_reaches_proxy_and_agent_renamed() -> None:
    chain = MemoryChain("proxy", "agent")
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"x":1.50}}'
    )
    assert chain.starts == 1
    [raw] = chain["proxy"].take_raw()
    assert raw.startswith(b'{"jsonrpc":"2.0","id":1,"method":"_proxy/initialize"')
    assert raw.endswith(b'"x":1.50}}')


def test_initialize_helper_and_a_prompt() -> None:
    chain = MemoryChain("proxy", "agent")
    chain.initialize()
    chain.editor.request(7, "session/prompt", {"sessionId": "s"})
    [to_proxy] = chain["proxy"].take()
    assert to_proxy["method"] == "session/prompt" and to_proxy["id"] != 7
    chain["proxy"].successor(to_proxy["id"], "session/prompt", to_proxy["params"])
    [to_agent] = chain["agent"].take()
    chain["agent"].notify("session/update", {"sessionId": "s"})
    chain["agent"].respond(to_agent["id"], {"stopReason": "end_turn"})
    update, answer = chain["proxy"].take()
    assert update["method"] == "_proxy/successor"
    chain["proxy"].notify("session/update", update["params"]["params"])
    chain["proxy"].respond(to_proxy["id"], answer["result"])
    got = chain.editor.take()
    assert [m.get("method") for m in got] == ["session/update", None]
    assert got[1] == {"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}}


class Prefix:
    async def on_session_update(self, call: Call) -> None:
        call.params["text"] = ">" + call.params["text"]


class Slow:
    async def on_session_update(self, call: Call) -> None:
        import trio

        await trio.sleep(0)
        call.params["text"] += "!"


async def test_plugins_inline_and_awaiting(nursery) -> None:  # type: ignore[no-untyped-def]
    chain = MemoryChain(Prefix(), Slow(), "agent", nursery=nursery)
    chain.initialize()
    chain["agent"].notify("session/update", {"text": "a"})
    chain["agent"].notify("session/update", {"text": "b"})
    await settle()
    assert [m["params"]["text"] for m in chain.editor.take()] == [">a!", ">b!"]
