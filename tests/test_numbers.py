"""Numbers pass as the bytes they are (spec section 4: "number values preserved").

A JSON number is text: `1e400` is valid JSON though no double holds it, a 30-digit integer
is exact, `1.50` and `1E+2` are spellings a sender may rely on. The conductor forwards
them as written, also when a plugin hook changes another part of the same message. Every
check reads the raw line and compares the spelling of each number, not its value.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import plugin_block, script_agent_block, start_session

# Spellings that a parse into doubles (and back) changes, in fields no hook touches.
SPELLINGS = {
    "finite": (
        b'{"big":123456789012345678901234567890,"neg":-987654321098765432109876543210,'
        b'"half":1.50,"hundred":1E+2,"negzero":-0.0}'
    ),
    "beyond-double": b'{"huge":1e400,"tiny":-1e400}',
}
MODES = ["inprocess", "standalone"]


def spelled(raw: bytes) -> Any:
    """Parse JSON keeping every number as ("number", its exact text)."""

    def number(text: str) -> tuple[str, str]:
        return ("number", text)

    return json.loads(raw, parse_int=number, parse_float=number)


def raw_prompt(id: int, session: str, text: str, meta: bytes) -> bytes:
    """A session/prompt line with `meta` (raw JSON) as the `_meta` of params and of its block."""
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%s,'
        b'"prompt":[{"type":"text","text":%s,"_meta":%s}],"_meta":%s}}'
        % (id, json.dumps(session).encode(), json.dumps(text).encode(), meta, meta)
    )


def test_number_beyond_double_from_the_editor_reaches_the_agent(make_chain, conductor, tmp_path):
    """`1e400` in a prompt's params is valid JSON: the prompt is answered, not -32700."""
    record = tmp_path / "agent.jsonl"
    chain = make_chain(script_agent_block("--record", str(record)))
    peer = conductor(chain)
    session = start_session(peer)
    meta = SPELLINGS["beyond-double"]
    peer.send_raw(raw_prompt(5, session, "hi", meta))
    _, response = peer.read_until(lambda m: "method" not in m)  # an answer, or a -32700
    assert response.get("id") == 5 and "result" in response, response
    prompts = [line for line in record.read_bytes().splitlines() if b'"session/prompt"' in line]
    assert len(prompts) == 1
    assert spelled(prompts[0])["params"]["_meta"] == spelled(meta)
    assert meta in prompts[0], "no hook touched it: the params pass byte for byte"


def test_number_beyond_double_from_the_agent_reaches_the_editor(make_chain, conductor):
    """An answer carrying `1e400` is valid JSON: it reaches the editor byte for byte,
    before the answer to the request sent after it."""
    result = b'{"big":1e400,"list":[1e400,-1e400],"ok":true}'
    chain = make_chain(script_agent_block("--raw", result.decode()))
    peer = conductor(chain)
    start_session(peer)
    peer.request(5, "_test/raw", {})
    peer.request(6, "_test/echo", {"after": 5})
    lines = []
    while True:
        line = peer.read_raw()
        message = json.loads(line)
        if message.get("id") == 6:
            break
        lines.append(line)
    answers = [line for line in lines if json.loads(line).get("id") == 5]
    assert answers, f"the answer carrying 1e400 never came (stderr: {peer.stderr[-1000:]})"
    assert spelled(answers[0])["result"] == spelled(result)
    assert result in answers[0]


@pytest.mark.parametrize("kind", list(SPELLINGS))
@pytest.mark.parametrize("mode", MODES)
def test_prompt_a_hook_modifies_keeps_its_other_numbers(
    make_chain, conductor, tmp_path, mode, kind
):
    """Tagger adds a block to the prompt; the numbers beside it reach the agent as sent."""
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Tagger", mode, "tagger")
        + script_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    session = start_session(peer)
    meta = SPELLINGS[kind]
    peer.send_raw(raw_prompt(5, session, "hi", meta))
    _, response = peer.read_until(lambda m: "method" not in m)  # an answer, or a -32700
    assert response.get("id") == 5 and "result" in response, response
    line = next(line for line in record.read_bytes().splitlines() if b'"session/prompt"' in line)
    params = spelled(line)["params"]
    texts = [block.get("text") for block in params["prompt"]]
    assert texts == ["[tag]", "hi"], "the hook did not modify the prompt"
    assert params["_meta"] == spelled(meta)
    assert params["prompt"][1]["_meta"] == spelled(meta)


@pytest.mark.parametrize("kind", list(SPELLINGS))
@pytest.mark.parametrize("mode", MODES)
def test_update_a_hook_modifies_keeps_its_other_numbers(make_chain, conductor, mode, kind):
    """The arrow proxy prefixes the first reply chunk; the numbers in the same update's
    `_meta` reach the editor as the agent wrote them."""
    meta = SPELLINGS[kind]
    chain = make_chain(
        plugin_block("proxies.arrow:ArrowProxy", mode, "arrow", prefix="> ")
        + script_agent_block("--raw", meta.decode())
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(
        5, "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}
    )
    lines = []
    while True:
        line = peer.read_raw()
        if json.loads(line).get("id") == 5:
            break
        lines.append(line)
    updates = [spelled(line) for line in lines if b'"session/update"' in line]
    assert updates, f"the update carrying the numbers never came (stderr: {peer.stderr[-1000:]})"
    update = updates[0]["params"]["update"]
    assert update["content"]["text"] == "> hello", "the hook did not modify the update"
    assert update["_meta"] == spelled(meta)
