"""Dialects (spec section 4): `_proxy/...` by default, `proxy/...` after a -32601 in `auto` or
when configured, each proxy answered in the form it uses, and the older draft (`legacy`)."""

from __future__ import annotations

import json
from typing import Any

from memory import MemoryChain

EXOTIC = b'{"protocolVersion":1,"z":1.0e5,"big":123456789012345678901234567890,"_meta":{"e":1.50}}'


def _start(chain: MemoryChain, params: dict[str, Any] | None = None) -> None:
    chain.editor.request("init", "initialize", params or {"protocolVersion": 1})


def _finish_initialize(chain: MemoryChain, proxy: str, wrapper: str) -> None:
    """The proxy forwards the initialize it got in `wrapper`; the agent answers it."""
    [init] = chain[proxy].take()
    chain[proxy].request(init["id"], wrapper, {"method": "initialize", "params": init["params"]})
    [agent_init] = chain["agent"].take()
    chain["agent"].respond(agent_init["id"], {"protocolVersion": 1})
    [answer] = chain[proxy].take()
    chain[proxy].respond(init["id"], answer["result"])
    [done] = chain.editor.take()
    assert done["result"] == {"protocolVersion": 1}, done


def _wrapped_to(chain: MemoryChain, proxy: str) -> str:
    """The method of the envelope a notification from the agent reaches `proxy` in."""
    chain["agent"].notify("session/update", {"sessionId": "s"})
    [message] = chain[proxy].take()
    assert message["params"] == {"method": "session/update", "params": {"sessionId": "s"}}
    return str(message["method"])


def test_underscore_is_the_default() -> None:
    chain = MemoryChain("p:proxy", "agent")
    _start(chain)
    [init] = chain["p"].received
    assert json.loads(init)["method"] == "_proxy/initialize"
    _finish_initialize(chain, "p", "_proxy/successor")
    assert _wrapped_to(chain, "p") == "_proxy/successor"


def test_auto_falls_back_to_proxy_initialize_after_minus_32601() -> None:
    chain = MemoryChain("p:proxy", "agent")
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":' + EXOTIC + b"}"
    )
    [first] = chain["p"].take()
    assert first["method"] == "_proxy/initialize"
    chain["p"].fail(first["id"], -32601, "Method not found")
    assert chain.editor.take() == [], "the -32601 is the conductor's to handle"
    [line] = chain["p"].take_raw()
    second = json.loads(line)
    assert second["method"] == "proxy/initialize"
    assert line.endswith(b'"params":' + EXOTIC + b"}"), "the retry carries the same params"
    chain["p"].request(
        second["id"], "proxy/successor", {"method": "initialize", "params": second["params"]}
    )
    [agent_init] = chain["agent"].take()
    assert agent_init["method"] == "initialize"
    chain["agent"].respond(agent_init["id"], {"protocolVersion": 1})
    [answer] = chain["p"].take()
    chain["p"].respond(second["id"], answer["result"])
    assert chain.editor.take() == [{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}}]
    assert _wrapped_to(chain, "p") == "proxy/successor"


def test_auto_falls_back_only_once() -> None:
    chain = MemoryChain("p:proxy", "agent")
    _start(chain)
    [first] = chain["p"].take()
    chain["p"].fail(first["id"], -32601, "Method not found")
    [second] = chain["p"].take()
    chain["p"].fail(second["id"], -32601, "Method not found")
    [answer] = chain.editor.take()
    assert answer["id"] == "init" and answer["error"]["code"] == -32601


def test_other_errors_to_proxy_initialize_do_not_fall_back() -> None:
    chain = MemoryChain("p:proxy", "agent")
    _start(chain)
    [first] = chain["p"].take()
    chain["p"].fail(first["id"], -32000, "not today")
    assert chain["p"].take() == []
    [answer] = chain.editor.take()
    assert answer["error"] == {"code": -32000, "message": "not today"}


def test_dialect_underscore_does_not_fall_back() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "underscore"})
    _start(chain)
    [first] = chain["p"].take()
    chain["p"].fail(first["id"], -32601, "Method not found")
    assert chain["p"].take() == []
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32601


def test_dialect_plain_speaks_proxy_initialize_and_proxy_successor() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "plain"})
    _start(chain)
    assert json.loads(chain["p"].received[0])["method"] == "proxy/initialize"
    _finish_initialize(chain, "p", "proxy/successor")
    assert _wrapped_to(chain, "p") == "proxy/successor"


def test_dialect_plain_does_not_fall_back() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "plain"})
    _start(chain)
    [first] = chain["p"].take()
    chain["p"].fail(first["id"], -32601, "Method not found")
    assert chain["p"].take() == []
    assert chain.editor.take()[0]["error"]["code"] == -32601


def test_a_proxy_using_the_plain_successor_form_is_answered_in_that_form() -> None:
    chain = MemoryChain("p:proxy", "agent")
    _start(chain)
    _finish_initialize(chain, "p", "proxy/successor")
    assert _wrapped_to(chain, "p") == "proxy/successor"
    # The agent's requests reach it in that form too.
    chain["agent"].request(9, "session/request_permission", {"sessionId": "s"})
    [message] = chain["p"].take()
    assert message["method"] == "proxy/successor"


def test_a_proxy_switching_back_to_the_underscore_form_is_answered_in_it() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "plain"})
    _start(chain)
    _finish_initialize(chain, "p", "_proxy/successor")
    assert _wrapped_to(chain, "p") == "_proxy/successor"


def test_each_proxy_is_answered_in_its_own_form() -> None:
    chain = MemoryChain("a:proxy", "b:proxy", "agent", dialects={"b": "plain"})
    _start(chain)
    chain.relay()
    [init] = chain["agent"].take()
    chain["agent"].respond(init["id"], {"protocolVersion": 1})
    chain.relay()
    chain.editor.take()
    chain["agent"].notify("_vendor/n", {})
    [to_b] = chain["b"].take()
    assert to_b["method"] == "proxy/successor"
    chain["b"].notify("_vendor/n", {})
    [to_a] = chain["a"].take()
    assert to_a["method"] == "_proxy/successor"


# ------------------------------------------------------------------- legacy


def _legacy_init(chain: MemoryChain, params: bytes) -> tuple[dict[str, Any], bytes]:
    chain.editor.send_raw(
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":' + params + b"}"
    )
    [line] = chain["p"].take_raw()
    return json.loads(line), line


def test_legacy_offers_the_proxy_role_in_a_plain_initialize() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    init, _ = _legacy_init(chain, b'{"protocolVersion":1,"_meta":{"editor":1}}')
    assert init["method"] == "initialize"
    assert init["params"] == {"protocolVersion": 1, "_meta": {"editor": 1, "proxy": True}}


def test_legacy_offer_keeps_every_other_byte_of_the_params() -> None:
    """Only `_meta.proxy` is added: number spellings and exact integers stay as sent."""
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    _, line = _legacy_init(chain, EXOTIC)
    assert b'"z":1.0e5' in line
    assert b'"big":123456789012345678901234567890' in line
    assert b'"e":1.50' in line


def test_legacy_full_round_trip_withdraws_the_hop_local_meta_both_ways() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    init, _ = _legacy_init(chain, b'{"protocolVersion":1,"_meta":{"editor":1}}')
    # The proxy forwards the initialize (still carrying the role offer, as the draft does).
    chain["p"].request(
        init["id"], "_proxy/successor/request", {"method": "initialize", "params": init["params"]}
    )
    [agent_init] = chain["agent"].take()
    assert agent_init["method"] == "initialize"
    assert agent_init["params"] == {"protocolVersion": 1, "_meta": {"editor": 1}}
    chain["agent"].respond(agent_init["id"], {"protocolVersion": 1, "agentInfo": {}})
    [back] = chain["p"].take()
    chain["p"].respond(init["id"], {**back["result"], "_meta": {"proxy": True, "kept": "yes"}})
    [answer] = chain.editor.take()
    assert answer == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"protocolVersion": 1, "agentInfo": {}, "_meta": {"kept": "yes"}},
    }
    # From then on, messages from below reach it named by kind.
    chain["agent"].notify("session/update", {"sessionId": "s"})
    chain["agent"].request(5, "session/request_permission", {"sessionId": "s"})
    got = chain["p"].take()
    assert [m["method"] for m in got] == [
        "_proxy/successor/notification",
        "_proxy/successor/request",
    ]
    assert got[0]["params"] == {"method": "session/update", "params": {"sessionId": "s"}}


def test_legacy_acceptance_with_only_the_proxy_key_leaves_no_meta() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    init, _ = _legacy_init(chain, b'{"protocolVersion":1}')
    chain["p"].respond(init["id"], {"protocolVersion": 1, "_meta": {"proxy": True}})
    [answer] = chain.editor.take()
    assert answer["result"] == {"protocolVersion": 1}


def test_legacy_proxy_must_accept_its_role() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    init, _ = _legacy_init(chain, b'{"protocolVersion":1}')
    chain["p"].respond(init["id"], {"protocolVersion": 1})
    [answer] = chain.editor.take()
    assert answer["error"]["code"] == -32600
    assert "proxy role" in answer["error"]["message"]
    assert answer["error"]["data"] == {"component": "p"}


def test_legacy_successor_notification_is_unwrapped() -> None:
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    _legacy_init(chain, b'{"protocolVersion":1}')
    chain["p"].notify("_proxy/successor/notification", {"method": "_vendor/n", "params": [1]})
    assert chain["agent"].take() == [{"jsonrpc": "2.0", "method": "_vendor/n", "params": [1]}]


def test_a_proxy_speaking_the_legacy_successor_is_answered_in_it() -> None:
    """A proxy configured `auto` that uses `_proxy/successor/request` is spoken to so."""
    chain = MemoryChain("p:proxy", "agent")
    _start(chain)
    _finish_initialize(chain, "p", "_proxy/successor/request")
    assert _wrapped_to(chain, "p") == "_proxy/successor/notification"


def test_legacy_withdrawal_keeps_every_other_byte_of_the_params() -> None:
    """The agent gets the initialize with only the hop-local `_meta.proxy` taken out."""
    chain = MemoryChain("p:proxy", "agent", dialects={"p": "legacy"})
    init, _ = _legacy_init(chain, b'{"protocolVersion":1}')
    chain["p"].send_raw(
        b'{"jsonrpc":"2.0","id":%d,"method":"_proxy/successor/request","params":{"method":'
        b'"initialize","params":{"protocolVersion":1,"z":1.0e5,'
        b'"big":123456789012345678901234567890,"_meta":{"e":1.50,"proxy":true}}}}' % init["id"]
    )
    [line] = chain["agent"].take_raw()
    assert line.endswith(
        b'"params":{"protocolVersion":1,"z":1.0e5,"big":123456789012345678901234567890,'
        b'"_meta":{"e":1.50}}}'
    )
