"""What a proxy may and may not send (spec section 4, initialization)."""

from __future__ import annotations

import json

from conftest import init_params, proxy_block, script_agent_block, wait_until


def test_proxy_initialize_sent_upward_by_a_proxy_is_refused(make_chain, conductor, tmp_path):
    """Only the conductor sends `_proxy/initialize`. A proxy that sends one plainly (toward
    its predecessor, here the editor) is answered -32600; the editor never sees it."""
    answers = tmp_path / "upward-answer.jsonl"
    chain = make_chain(proxy_block("--upward-init", str(answers)) + script_agent_block())
    peer = conductor(chain)
    peer.request(0, "initialize", init_params())
    before, response = peer.response(0)
    assert "result" in response, response
    # The proxy sends its request right after it answers initialize, so anything the
    # conductor passed on reaches us before the answer to a request made after that.
    peer.request(1, "session/new", {"cwd": "/tmp", "mcpServers": []})
    after, response = peer.response(1)
    assert "result" in response, response
    leaked = [
        m for m in before + after if m.get("method") in ("_proxy/initialize", "proxy/initialize")
    ]
    assert not leaked, f"the proxy's _proxy/initialize reached the editor: {leaked}"
    wait_until(lambda: answers.exists() and answers.read_text().strip(), what="an answer")
    answer = json.loads(answers.read_text().splitlines()[0])
    assert answer["id"] == "upward-init"
    assert answer.get("error", {}).get("code") == -32600, answer
