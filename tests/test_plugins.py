"""Plugin proxies, each run both in-process and standalone (`conductor proxy`), same results."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import (
    PY,
    ROOT,
    agent_text,
    allow_permission,
    demo_agent_block,
    plugin_block,
    prompt_params,
    proxy_block,
    read_jsonl,
    start_session,
)

MODES = ["inprocess", "standalone"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_prompt_is_modified_and_local_answers_stay_local(make_chain, conductor, tmp_path, mode):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Tagger", mode, "tagger", tag="[ctx]")
        + demo_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    session = start_session(peer)
    updates, response = peer.prompt(5, session, "hello")
    assert response["result"]["stopReason"] == "end_turn"
    assert agent_text(updates) == "You said: [ctx]\nhello"
    peer.request(6, "_test/local", {"sessionId": session})
    _, answer = peer.response(6)
    assert answer["result"] == {"answeredBy": "[ctx]", "prompts": 1}
    assert not [m for m in read_jsonl(record) if m.get("method") == "_test/local"]


def test_raising_hook_answers_with_an_error_and_the_chain_keeps_serving(
    make_chain, conductor, mode
):
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Boom", mode, "boomer") + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(5, "_test/boom", {})
    _, response = peer.response(5)
    error = response["error"]
    assert (
        "boomer" in error["message"]
        and "ValueError" in error["message"]
        and "kaboom" in error["message"]
    )
    assert error["data"]["proxy"] == "boomer"
    # A notification hook that raised: the update goes on as it arrived, not half-modified.
    updates, response = peer.prompt(6, session, "still here")
    assert response["result"]["stopReason"] == "end_turn"
    assert agent_text(updates) == "You said: still here"
    peer.close_stdin()
    peer.wait()
    assert "kaboom" in peer.stderr and "Traceback" in peer.stderr


def test_plugin_sends_its_own_request_mid_prompt(make_chain, conductor, tmp_path, mode):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Asker", mode, "asker")
        + demo_agent_block("--record", str(record))
    )
    peer = conductor(chain)
    session = start_session(peer)
    updates, response = peer.prompt(5, session, "hi")
    assert response["result"]["stopReason"] == "end_turn"
    note = next(m for m in updates if m.get("method") == "_asker/done")
    assert note["params"] == {
        "echo": {"params": {"from": "asker"}},
        "reply": {"stopReason": "end_turn"},
    }
    methods = [m.get("method") for m in read_jsonl(record)]
    assert methods.index("_demo/echo") < methods.index("session/prompt")


def test_mixed_chain_permission_round_trip(make_chain, conductor, mode):
    chain = make_chain(
        plugin_block("proxies.arrow:ArrowProxy", mode, "arrow", prefix=">> ")
        + proxy_block("--tag", "")
        + plugin_block("tests.fixtures.plugins:Watcher", mode, "watcher")
        + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "ask permission"))
    allow_permission(peer)
    updates, response = peer.response(5)
    assert response["result"]["stopReason"] == "end_turn"
    assert agent_text(updates) == ">> Permission granted. You said: ask permission"


def test_plugin_answers_permission_requests(make_chain, conductor, mode):
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Allow", mode, "allow") + demo_agent_block()
    )
    peer = conductor(chain)
    session = start_session(peer)
    updates, response = peer.prompt(5, session, "permission please")
    assert not [u for u in updates if u.get("method") == "session/request_permission"]
    assert "granted" in agent_text(updates)
    assert response["result"]["stopReason"] == "end_turn"


def test_order_is_kept_behind_slow_hooks(make_chain, conductor, mode):
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Slow", mode, "slow")
        + demo_agent_block("--chunks", "30")
    )
    peer = conductor(chain)
    session = start_session(peer)
    text = "abcdefghijklmnopqrstuvwxyz0123456789"
    updates, response = peer.prompt(5, session, text)
    assert agent_text(updates) == "You said: " + text
    assert response["result"]["stopReason"] == "end_turn"


def test_cancel_passes_through_a_plugin(make_chain, conductor, mode):
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Tagger", mode, "tagger")
        + demo_agent_block("--delay", "0.3", "--chunks", "20")
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request("p", "session/prompt", prompt_params(session, "take your time"))
    peer.read_until(lambda m: m.get("method") == "session/update")
    peer.notify("$/cancel_request", {"requestId": "p"})
    _, response = peer.response("p", timeout=10)
    assert response["error"]["code"] == -32800


def test_same_transcript_in_process_and_standalone(make_chain, conductor):
    def transcript(mode: str) -> list:
        chain = make_chain(
            plugin_block("tests.fixtures.plugins:Tagger", mode, "tagger", tag="T")
            + plugin_block("proxies.arrow:ArrowProxy", mode, "arrow")
            + demo_agent_block()
        )
        peer = conductor(chain)
        session = start_session(peer)
        peer.request(5, "session/prompt", prompt_params(session, "ask permission"))
        before, request = allow_permission(peer)
        updates, response = peer.response(5)
        peer.request(6, "_test/local", {"sessionId": session})
        _, local = peer.response(6)
        request.pop("id")
        return [*before, request, *updates, response, local]

    assert transcript("inprocess") == transcript("standalone")


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ('plugin = "no_such_module:X"', "cannot import 'no_such_module'"),
        ('plugin = "proxies.arrow:Nope"', "has no 'Nope'"),
        ('plugin = "not-installed-name"', "no plugin named 'not-installed-name'"),
        (
            'plugin = "tests.fixtures.plugins:bad_factory"\noptions = { level = -1 }',
            "level must not be negative",
        ),
        (
            'plugin = "tests.fixtures.plugins:bad_factory"\noptions = { nope = 1 }',
            "rejected its options",
        ),
    ],
)
def test_bad_plugins_fail_before_anything_starts(make_chain, tmp_path, block, expected):
    record = tmp_path / "agent.jsonl"
    chain = make_chain(f"[[proxy]]\n{block}\n" + demo_agent_block("--record", str(record)))
    for command in ("check", "run"):
        done = subprocess.run(
            [sys.executable, "-m", "conductor", command, str(chain)],
            input=b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n',
            capture_output=True,
            cwd=ROOT,
            timeout=30,
        )
        err = done.stderr.decode()
        assert done.returncode == 2, (command, err)
        assert expected in err and "Traceback" not in err, err
        assert done.stdout == b""
    assert not record.exists()


def test_conductor_proxy_rejects_bad_options():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conductor",
            "proxy",
            "tests.fixtures.plugins:bad_factory",
            "-o",
            "level",
        ],
        capture_output=True,
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 2 and b"KEY=VALUE" in done.stderr


def test_hooks_may_wait_on_the_side_their_message_came_from(make_chain, conductor, mode):
    chain = make_chain(
        plugin_block("tests.fixtures.plugins:Consulting", mode, "consulting")
        + demo_agent_block("--chunks", "2")
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "hi"))
    _, ask = peer.read_until(lambda m: m.get("method") == "_test/consult")
    peer.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"a": "yes"}})
    updates, response = peer.response(5)
    assert response["result"]["stopReason"] == "end_turn"
    chunks = [
        u["params"]["update"]["content"]["text"]
        for u in updates
        if u.get("method") == "session/update"
    ]
    assert all(c.endswith("(1)") for c in chunks) and len(chunks) == 2
    assert "".join(c[:-3] for c in chunks) == "You said: yes\nhi"


def test_plugins_in_front_of_the_official_sdk_agent(make_chain, conductor):
    agent = f"[agent]\ncommand = {json.dumps([PY, str(ROOT / 'tests' / 'peers' / 'sdk_echo_agent.py')])}\n"
    chain = make_chain(
        plugin_block("proxies.arrow:ArrowProxy", "inprocess", "arrow")
        + proxy_block()
        + plugin_block("tests.fixtures.plugins:Tagger", "standalone", "tagger", tag="[t]")
        + agent
    )
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "ask permission"))
    allow_permission(peer)
    updates, response = peer.response(5)
    assert response["result"]["stopReason"] == "end_turn"
    text = agent_text(updates)
    assert text.startswith("> Echo: ") and "[t]" in text and "ask permission" in text
