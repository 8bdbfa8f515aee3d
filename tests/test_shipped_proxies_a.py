"""The shipped context and redact proxies, in real chains in front of the demo agent.

Each scenario runs in-process and standalone (`conductor proxy`), for ACP v1 and v2, and must
give the same transcript both ways.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ROOT,
    agent_text,
    demo_agent_block,
    plugin_block,
    prompt_params,
    read_jsonl,
    start_session,
)

from proxies.context import ContextProxy
from proxies.redact import DEFAULT_PATTERNS, RedactProxy

MODES = ("inprocess", "standalone")
CONTEXT = "proxies.context:ContextProxy"
REDACT = "proxies.redact:RedactProxy"


def prompt_turn(peer: Any, request_id: int, session: str, prompt: Any, version: int) -> list[Any]:
    """Send one prompt (text or content blocks); return its updates and response."""
    blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
    peer.request(request_id, "session/prompt", {"sessionId": session, "prompt": blocks})
    updates, response = peer.response(request_id)
    assert "result" in response, response
    if version == 1:
        assert response["result"] == {"stopReason": "end_turn"}
    else:  # v2: the turn ends with an idle state update, then the prompt response
        last = updates[-1]["params"]["update"]
        assert last == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    return [*updates, response]


def new_session(peer: Any, request_id: int) -> str:
    peer.request(request_id, "session/new", {"cwd": "/tmp", "mcpServers": []})
    _, response = peer.response(request_id)
    return str(response["result"]["sessionId"])


def received_prompts(record: Path) -> list[Any]:
    """The `prompt` blocks of each session/prompt the demo agent received."""
    return [
        m["params"]["prompt"] for m in read_jsonl(record) if m.get("method") == "session/prompt"
    ]


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


# ----------------------------------------------------------------------------------- context


def context_run(make_chain, conductor, tmp_path, mode, version, **options):
    record = tmp_path / f"context-{mode}.jsonl"
    chain = make_chain(
        plugin_block(CONTEXT, mode, "context", **options)
        + demo_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    first = start_session(peer, version)
    turns = [
        prompt_turn(peer, 5, first, "first", version),
        prompt_turn(peer, 6, first, "second", version),
    ]
    other = new_session(peer, 7)
    turns.append(prompt_turn(peer, 8, other, "other session", version))
    peer.close_stdin()
    assert peer.wait() == 0, peer.stderr
    return turns, received_prompts(record)


@pytest.mark.parametrize("version", [1, 2])
def test_context_goes_to_the_first_prompt_of_each_session(make_chain, conductor, tmp_path, version):
    notes = tmp_path / "notes.md"
    notes.write_text("Use tabs.\n")
    header = f"--- {notes} ---\nUse tabs.\n"
    options = {"text": "Be brief.", "files": [str(notes)]}
    runs = [context_run(make_chain, conductor, tmp_path, m, version, **options) for m in MODES]
    assert runs[0] == runs[1]
    turns, prompts = runs[0]
    assert prompts == [
        [text("Be brief."), text(header), text("first")],
        [text("second")],
        [text("Be brief."), text(header), text("other session")],
    ]
    assert agent_text(turns[0]) == f"You said: Be brief.\n{header}\nfirst"
    assert agent_text(turns[1]) == "You said: second"
    assert agent_text(turns[2]) == f"You said: Be brief.\n{header}\nother session"


@pytest.mark.parametrize("version", [1, 2])
def test_context_on_every_prompt(make_chain, conductor, tmp_path, version):
    options = {"text": "Rules.", "every_prompt": True}
    runs = [context_run(make_chain, conductor, tmp_path, m, version, **options) for m in MODES]
    assert runs[0] == runs[1]
    turns, prompts = runs[0]
    assert prompts == [
        [text("Rules."), text("first")],
        [text("Rules."), text("second")],
        [text("Rules."), text("other session")],
    ]
    assert [agent_text(t) for t in turns] == [
        "You said: Rules.\nfirst",
        "You said: Rules.\nsecond",
        "You said: Rules.\nother session",
    ]


def test_context_is_sent_again_after_a_failed_prompt(make_chain, conductor, tmp_path):
    runs = []
    for mode in MODES:
        record = tmp_path / f"failed-{mode}.jsonl"
        chain = make_chain(
            plugin_block(CONTEXT, mode, "context", text="Rules.")
            + demo_agent_block("--chunks", "20", "--record", str(record))
        )
        peer = conductor(chain)
        session = start_session(peer)
        peer.request(5, "session/prompt", prompt_params(session, "slow, cancel me"))
        peer.read_until(lambda m: m.get("method") == "session/update")
        peer.notify("$/cancel_request", {"requestId": 5})
        _, response = peer.response(5)
        assert response["error"]["code"] == -32800
        peer.request(6, "session/prompt", prompt_params(session, "next"))
        peer.response(6)
        peer.request(7, "session/prompt", prompt_params(session, "last"))
        peer.response(7)
        runs.append(received_prompts(record))
    assert runs[0] == runs[1]
    assert runs[0] == [
        [text("Rules."), text("slow, cancel me")],
        [text("Rules."), text("next")],
        [text("last")],
    ]


def test_context_relative_files(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("from base_dir")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("from cwd")
    assert ContextProxy(files=["a.md"], base_dir=str(tmp_path)).blocks == [
        "--- a.md ---\nfrom base_dir"
    ]
    monkeypatch.chdir(tmp_path / "sub")
    assert ContextProxy(files=["a.md"]).blocks == ["--- a.md ---\nfrom cwd"]
    assert ContextProxy(files=["a.md"], base_dir="..").blocks == ["--- a.md ---\nfrom base_dir"]


# ------------------------------------------------------------------------------------ redact

OPENAI = "sk-proj-" + "A1b2C3d4" * 3
GITHUB = "ghp_" + "x" * 36
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
SLACK = "xoxb-1234567890-abcdef"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature"
SECRETS = [OPENAI, GITHUB, AWS, SLACK, BEARER]
PROMPT = (
    f"openai {OPENAI}, github {GITHUB}, aws {AWS}, slack {SLACK},"
    f" Authorization: {BEARER}; harmless: sk-short ghp_short"
)
MASKED = (
    "openai [REDACTED], github [REDACTED], aws [REDACTED], slack [REDACTED],"
    " Authorization: [REDACTED]; harmless: sk-short ghp_short"
)

# Sits between redact and the agent and puts a secret into the agent's output: the reply
# text, a thought chunk and tool call content (nothing else in the chain produces secrets
# toward the editor, since the demo agent only echoes the already masked prompt).
INJECTOR = f"""
SECRET = {GITHUB!r}

class Injector:
    async def on_session_update(self, call):
        update = call.params["update"]
        content = update.get("content")
        if update.get("sessionUpdate") != "agent_message_chunk" or "PLACEHOLDER" not in content["text"]:
            return
        session = call.params["sessionId"]
        thought = {{"sessionUpdate": "agent_thought_chunk", "messageId": "t-1",
                   "content": {{"type": "text", "text": "thinking about " + SECRET}}}}
        tool = {{"sessionUpdate": "tool_call_update", "toolCallId": "c-1",
                "content": [{{"type": "content", "content": {{"type": "text", "text": "token=" + SECRET}}}}]}}
        call.ctx.notify_editor("session/update", {{"sessionId": session, "update": thought}})
        call.ctx.notify_editor("session/update", {{"sessionId": session, "update": tool}})
        content["text"] = content["text"].replace("PLACEHOLDER", SECRET)
"""


def redact_run(make_chain, conductor, tmp_path, mode, version):
    (tmp_path / "inject_secrets.py").write_text(INJECTOR)
    record = tmp_path / f"redact-{mode}.jsonl"
    chain = make_chain(
        plugin_block(REDACT, mode, "redact")
        + '[[proxy]]\nname = "inject"\nplugin = "inject_secrets:Injector"\n'
        + demo_agent_block("--chunks", "1", "--record", str(record))
    )
    peer = conductor(chain)
    session = start_session(peer, version)
    resource = {
        "type": "resource",
        "resource": {"uri": "file:///env", "mimeType": "text/plain", "text": f"KEY={OPENAI}"},
    }
    turns = [
        prompt_turn(peer, 5, session, [text(PROMPT), resource], version),
        prompt_turn(peer, 6, session, "show me PLACEHOLDER", version),
    ]
    peer.close_stdin()
    assert peer.wait() == 0, peer.stderr
    return turns, received_prompts(record)


def updates_of(messages: list[Any], kind: str) -> list[Any]:
    return [
        m["params"]["update"]
        for m in messages
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == kind
    ]


@pytest.mark.parametrize("version", [1, 2])
def test_redact_masks_toward_agent_and_editor(make_chain, conductor, tmp_path, version):
    runs = [redact_run(make_chain, conductor, tmp_path, mode, version) for mode in MODES]
    assert runs[0] == runs[1]
    turns, prompts = runs[0]
    # Toward the agent: what the demo agent actually read.
    assert prompts[0] == [
        text(MASKED),
        {
            "type": "resource",
            "resource": {"uri": "file:///env", "mimeType": "text/plain", "text": "KEY=[REDACTED]"},
        },
    ]
    assert prompts[1] == [text("show me PLACEHOLDER")]
    # Toward the editor: nothing secret anywhere, and each place was masked.
    everything = json.dumps(turns)
    assert not [s for s in SECRETS if s in everything]
    assert agent_text(turns[0]) == f"You said: {MASKED}"
    assert agent_text(turns[1]) == "You said: show me [REDACTED]"
    thought = updates_of(turns[1], "agent_thought_chunk")
    assert [u["content"]["text"] for u in thought] == ["thinking about [REDACTED]"]
    tool = updates_of(turns[1], "tool_call_update")
    assert [u["content"][0]["content"]["text"] for u in tool] == ["token=[REDACTED]"]
    if version == 2:  # the v2 agent echoes the prompt back as a user_message
        echoed = updates_of(turns[0], "user_message")
        assert echoed[0]["content"][0] == text(MASKED)


def test_redact_custom_patterns_and_replacement(make_chain, conductor, tmp_path):
    outputs = []
    for mode in MODES:
        record = tmp_path / f"custom-{mode}.jsonl"
        chain = make_chain(
            plugin_block(REDACT, mode, "redact", patterns=[r"\bhunter\d+\b"], replacement="***")
            + demo_agent_block("--record", str(record))
        )
        peer = conductor(chain)
        session = start_session(peer)
        turn = prompt_turn(peer, 5, session, f"pw hunter22 and {OPENAI}", 1)
        outputs.append((turn, received_prompts(record)))
    assert outputs[0] == outputs[1]
    turn, prompts = outputs[0]
    assert prompts == [[text(f"pw *** and {OPENAI}")]]  # the defaults were replaced
    assert agent_text(turn) == f"You said: pw *** and {OPENAI}"


def test_redact_mask_unit():
    proxy = RedactProxy()
    assert proxy.mask(PROMPT) == MASKED
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----"
    assert proxy.mask(f"key:\n{key}\nend") == "key:\n[REDACTED]\nend"
    assert proxy.mask("AIza" + "B" * 35) == "[REDACTED]"
    assert RedactProxy(replacement=r"\1 \g<0>").mask(OPENAI) == r"\1 \g<0>"  # taken literally
    assert len(DEFAULT_PATTERNS) == len(proxy.patterns)


# ------------------------------------------------------------------------ chain files, errors


def conductor_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("chain", "prompts", "expected"),
    [
        (
            "chains/context.toml",
            ["hello", "again"],
            "You said: Context: answer in one sentence.\nhello\nYou said: again\n",
        ),
        (
            "chains/redact.toml",
            [f"my key is {OPENAI}, ok"],
            "You said: my key is [REDACTED], ok\n",
        ),
    ],
)
def test_shipped_chain_files_run(chain, prompts, expected):
    check = conductor_cli("check", chain)
    assert check.returncode == 0, check.stderr
    done = conductor_cli("prompt", chain, *prompts)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            f'plugin = "{CONTEXT}"\noptions = {{ files = ["missing.md"], base_dir = "/nonexistent" }}',
            "context file '/nonexistent/missing.md' not found",
        ),
        (f'plugin = "{CONTEXT}"\noptions = {{ every_prompt = true }}', "nothing to add"),
        (
            f"plugin = \"{REDACT}\"\noptions = {{ patterns = ['sk-[a-z'] }}",
            "invalid regular expression 'sk-[a-z'",
        ),
        (
            f"plugin = \"{REDACT}\"\noptions = {{ patterns = ['x*'] }}",
            "pattern 'x*' matches the empty string",
        ),
    ],
)
def test_factory_errors_fail_check(make_chain, tmp_path, block, expected):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        textwrap.dedent(f"[[proxy]]\n{block}\n") + demo_agent_block("--record", str(record))
    )
    done = conductor_cli("check", str(chain))
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    assert not record.exists()


def test_factory_error_standalone():
    done = conductor_cli("proxy", REDACT, "-o", 'patterns=["("]')
    assert done.returncode == 2
    assert "invalid regular expression '('" in done.stderr and "Traceback" not in done.stderr
