"""docs/writing-proxies.md: every snippet is real code, and that code works."""

from __future__ import annotations

import json
import re

import pytest
from conftest import (
    ROOT,
    agent_text,
    demo_agent_block,
    plugin_block,
    prompt_params,
    script_agent_block,
    start_session,
)

DOC = ROOT / "docs" / "writing-proxies.md"
EXAMPLES = ROOT / "docs" / "examples"


def test_every_python_snippet_is_an_example_file():
    snippets = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    files = {p.name: p.read_text() for p in EXAMPLES.glob("*.py")}
    assert len(snippets) == len(files) == 5
    for snippet in snippets:
        assert snippet in files.values(), snippet[:80]


@pytest.mark.parametrize("mode", ["inprocess", "standalone"])
def test_prefix_example(make_chain, conductor, mode):
    chain = make_chain(
        plugin_block("docs.examples.prefix:Prefix", mode, "prefix", prefix=">> ")
        + demo_agent_block("--chunks", "2")
    )
    peer = conductor(chain)
    session = start_session(peer)
    updates, _ = peer.prompt(5, session, "hello")
    assert agent_text(updates) == ">> You said>> : hello"


def test_counter_example(make_chain, conductor):
    chain = make_chain(
        plugin_block("docs.examples.counter:PromptCounter", "inprocess", "counter")
        + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    for i in (1, 2):
        updates, _ = peer.prompt(i + 10, session, "hi")
        assert agent_text(updates) == f"You said: (prompt {i})\nhi"
    peer.request(20, "_counter/get", {"sessionId": session})
    _, answer = peer.response(20)
    assert answer["result"] == {"prompts": 2}


def test_both_ways_example(make_chain, conductor):
    chain = make_chain(
        plugin_block("docs.examples.both_ways:Auditor", "inprocess", "auditor") + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    updates, response = peer.prompt(5, session, "hi")
    note = next(m for m in updates if m.get("method") == "_audit/prompt")
    assert note["params"] == {"agentSaid": {"params": {"audit": True}}, "stopReason": "end_turn"}
    assert response["result"]["stopReason"] == "end_turn"


def test_quiet_example_passes_other_updates(make_chain, conductor):
    chain = make_chain(
        plugin_block("docs.examples.quiet:NoThoughts", "inprocess", "quiet") + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    updates, _ = peer.prompt(5, session, "hi")
    assert agent_text(updates) == "You said: hi"


def test_notes_tools_example(make_chain, conductor, tmp_path):
    """The @tool example, called by a native agent through the conductor."""
    chain = make_chain(
        plugin_block("docs.examples.notes_tools:Notes", "inprocess", "notes")
        + script_agent_block(name="agent")
    )
    peer = conductor(chain)
    session = start_session(peer)

    def call(request_id: int, name: str, arguments: dict) -> str:
        spec = {"method": "tools/call", "params": {"name": name, "arguments": arguments}}
        peer.request(
            request_id, "session/prompt", prompt_params(session, "mcpcall " + json.dumps(spec))
        )
        updates, _ = peer.response(request_id)
        return agent_text(updates)

    assert '"text": "nothing noted yet"' in call(5, "recall", {})
    assert "noted (1 so far)" in call(6, "remember", {"note": "buy milk"})
    assert '\\"buy milk\\"' in call(7, "recall", {"last": 1})
