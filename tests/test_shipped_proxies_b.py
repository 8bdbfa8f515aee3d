"""The permissions and recorder proxies, in real chains in front of the demo agent.

Each scenario runs in-process and standalone (`conductor proxy`), for ACP v1 and v2, and
the two ways must give identical results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PY,
    ROOT,
    agent_text,
    demo_agent_block,
    plugin_block,
    prompt_params,
    read_jsonl,
    start_session,
)

MODES = ("inprocess", "standalone")
VERSIONS = (1, 2)
PERMISSIONS = "proxies.permissions:PermissionsProxy"
RECORDER = "proxies.recorder:RecorderProxy"


def block(spec: str, mode: str, name: str, **options: object) -> str:
    """A [[proxy]] running `spec` in-process or standalone; a standalone one logs at INFO."""
    text = plugin_block(spec, mode, name, **options)
    return text.replace('"conductor", "proxy"', '"conductor", "--log-level", "info", "proxy"')


def allow_reply(request: dict[str, Any]) -> dict[str, Any]:
    outcome = {"outcome": "selected", "optionId": "allow"}
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}}


def permission_turn(peer: Any, session: str, text: str = "ask permission") -> dict[str, Any]:
    """One prompt; the editor allows whatever it is asked. Returns what the editor saw."""
    peer.request(5, "session/prompt", prompt_params(session, text))
    seen: list[Any] = []
    asked = []
    while True:
        message = peer.read()
        if message.get("id") == 5 and "method" not in message:
            break
        if message.get("method") == "session/request_permission":
            peer.send(allow_reply(message))
            message = {k: v for k, v in message.items() if k != "id"}  # hop-local
            asked.append(message)
        seen.append(message)
    return {"updates": seen, "asked": asked, "response": message, "text": agent_text(seen)}


# ----------------------------------------------------------------------------- permissions

CASES = {
    # name: (options, decision taken, rule number, reply text)
    "allow-by-kind": (
        {
            "rules": [
                {"kind": "read", "decision": "reject"},
                {"kind": "execute", "decision": "allow"},
            ]
        },
        "allow",
        2,
        "Permission granted. ",
    ),
    "reject-by-title": (
        # v1: the permission title is the tool's; v2: it matches the subject's tool call title.
        {"rules": [{"title": "Demo tool", "decision": "reject"}], "default": "allow"},
        "reject",
        1,
        "Permission denied. ",
    ),
    "ask-by-default": (
        {"rules": [{"title": "rm *", "decision": "reject"}, {"kind": "read", "decision": "allow"}]},
        "ask",
        None,
        "Permission granted. ",  # the editor allows
    ),
}


def run_permissions(make_chain, conductor, tmp_path, mode, version, options) -> dict[str, Any]:
    log_file = tmp_path / f"permissions-{mode}.jsonl"
    proxy = block(PERMISSIONS, mode, "permissions", log_file=str(log_file), **options)
    peer = conductor(make_chain(proxy + demo_agent_block()), "--log-level", "info")
    session = start_session(peer, version)
    turn = permission_turn(peer, session)
    peer.close_stdin()
    assert peer.wait() == 0, peer.stderr
    turn["log"] = [{k: v for k, v in e.items() if k != "ts"} for e in read_jsonl(log_file)]
    turn["stderr"] = [line for line in peer.stderr_lines if "INFO permission" in line]
    return turn


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_permission_rules(make_chain, conductor, tmp_path, version, case):
    options, decision, rule, prefix = CASES[case]
    runs = [run_permissions(make_chain, conductor, tmp_path, m, version, options) for m in MODES]
    inprocess, standalone = runs
    for key in ("updates", "asked", "response", "log"):
        assert inprocess[key] == standalone[key], key
    title = "Demo tool" if version == 1 else "Run Demo tool?"
    for turn in runs:
        assert turn["text"] == prefix + "You said: ask permission"
        expected_response = {"stopReason": "end_turn"} if version == 1 else {"messageId": "msg-1"}
        assert turn["response"]["result"] == expected_response
        if version == 2:
            last = turn["updates"][-1]["params"]["update"]
            assert last["sessionUpdate"] == "state_update" and last["state"] == "idle"
        if decision == "ask":
            [asked] = turn["asked"]
            if version == 1:
                assert asked["params"]["toolCall"]["title"] == "Demo tool"
            else:
                assert asked["params"]["title"] == title
                assert asked["params"]["subject"]["toolCall"]["kind"] == "execute"
        else:
            assert turn["asked"] == []  # answered in the proxy: the editor never sees it
        option = {"allow": "allow", "reject": "reject", "ask": None}[decision]
        assert turn["log"] == [
            {
                "sessionId": "sess-1",
                "title": title,
                "kind": "execute",
                "rule": rule,
                "decision": decision,
                "optionId": option,
            }
        ]
        where = f"rule {rule}" if rule else "default"
        [line] = turn["stderr"]
        assert (
            f"permission {title!r} (kind execute) in session sess-1: {decision} ({where})" in line
        )


def test_decisions_without_a_matching_option(tmp_path):
    """Unit check of the fallbacks, no chain needed: allow -> ask, reject -> cancelled."""
    import trio

    from proxies.permissions import PermissionsProxy

    class FakeCall:
        def __init__(self, params: dict[str, Any]) -> None:
            self.params = params
            self.session_id = params["sessionId"]
            self.answer: Any = None

        def respond(self, result: Any) -> None:
            self.answer = result

    only_allow = {
        "sessionId": "s",
        "toolCall": {"toolCallId": "c", "title": "x", "kind": "edit"},
        "options": [
            {"optionId": "always", "name": "Always", "kind": "allow_always"},
            {"optionId": "once", "name": "Once", "kind": "allow_once"},
        ],
    }
    only_reject = {
        **only_allow,
        "options": [{"optionId": "no", "name": "No", "kind": "reject_once"}],
    }
    cases = [
        ("allow", only_allow, {"outcome": {"outcome": "selected", "optionId": "once"}}),
        ("reject", only_allow, {"outcome": {"outcome": "cancelled"}}),
        ("allow", only_reject, None),  # forwarded to the editor
    ]
    for default, params, expected in cases:
        call = FakeCall(params)
        proxy = PermissionsProxy(default=default, log_file=str(tmp_path / "log.jsonl"))
        trio.run(proxy.on_session_request_permission, call)
        assert call.answer == expected
    decisions = [e["decision"] for e in read_jsonl(tmp_path / "log.jsonl")]
    assert decisions == ["allow", "reject", "ask"]


# -------------------------------------------------------------------------------- recorder


def strip_ts(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for line in lines:
        assert isinstance(line.pop("ts"), str)
    return lines


def run_recorder(make_chain, conductor, tmp_path, mode, version) -> dict[str, Any]:
    folder = tmp_path / f"sessions-{mode}"
    peer = conductor(
        make_chain(block(RECORDER, mode, "rec", folder=str(folder)) + demo_agent_block())
    )
    session = start_session(peer, version)
    turn = permission_turn(peer, session)
    peer.close_stdin()
    assert peer.wait() == 0, peer.stderr
    files = {p.name: strip_ts(read_jsonl(p)) for p in sorted(folder.iterdir())}
    return {"turn": turn, "files": files, "session": session}


@pytest.mark.parametrize("version", VERSIONS)
def test_recorder_writes_whole_sessions(make_chain, conductor, tmp_path, version):
    runs = [run_recorder(make_chain, conductor, tmp_path, m, version) for m in MODES]
    assert runs[0] == runs[1]
    run = runs[0]
    turn, files = run["turn"], run["files"]
    assert turn["text"] == "Permission granted. You said: ask permission"
    assert sorted(files) == ["connection.jsonl", "sess-1.jsonl"]
    assert [(m["type"], m["method"]) for m in files["connection.jsonl"]] == [
        ("request", "initialize"),
        ("response", "initialize"),
    ]
    assert files["connection.jsonl"][1]["result"]["protocolVersion"] == version
    lines = files["sess-1.jsonl"]
    summary = [(m["direction"], m["type"], m["method"]) for m in lines]
    to_agent, to_editor = "editor->agent", "agent->editor"
    assert summary[:3] == [
        (to_agent, "request", "session/new"),
        (to_editor, "response", "session/new"),
        (to_agent, "request", "session/prompt"),
    ]
    assert lines[1]["result"] == {"sessionId": "sess-1"}
    assert lines[2]["params"] == prompt_params("sess-1", "ask permission")
    assert summary[-1] == (to_editor, "response", "session/prompt")
    assert lines[-1]["result"] == turn["response"]["result"]
    # What the agent sent is recorded in the order the editor got it, with the editor's
    # answer to the permission request right after that request.
    from_agent = [m for m in lines[3:-1] if m["direction"] == to_editor]
    assert [m["params"] for m in from_agent] == [m["params"] for m in turn["updates"]]
    asking = next(i for i, m in enumerate(lines) if m["method"] == "session/request_permission")
    assert lines[asking]["type"] == "request" and lines[asking]["id"] is not None
    answer = lines[asking + 1]
    assert (answer["direction"], answer["type"], answer["id"]) == (
        to_agent,
        "response",
        lines[asking]["id"],
    )
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert all(m["id"] is None for m in lines if m["type"] == "notification")
    if version == 2:
        assert lines[-2]["params"]["update"]["state"] == "idle"


def test_recorder_changes_nothing_the_editor_sees(make_chain, conductor, tmp_path):
    def transcript(proxy: str) -> dict[str, Any]:
        peer = conductor(make_chain(proxy + demo_agent_block()))
        return permission_turn(peer, start_session(peer, 2))

    folder = tmp_path / "sessions"
    plain = transcript("")
    assert transcript(block(RECORDER, "inprocess", "rec", folder=str(folder))) == plain


def test_recorder_file_names_are_safe(tmp_path):
    from proxies.recorder import file_name

    assert file_name("sess-1") == "sess-1.jsonl"
    assert file_name("0f8e-AB_c.d") == "0f8e-AB_c.d.jsonl"
    odd = ["a/b", "a_b", "../x", "con", "connection", "", "x" * 300, "é:*?"]
    names = [file_name(s) for s in odd]
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) < 120 and "/" not in name and not name.startswith(".")
        assert name not in ("connection.jsonl", "con.jsonl")
        (tmp_path / name).write_text("ok")  # the file system takes it


# ---------------------------------------------------------------------- chain files, errors


def conductor_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def test_permissions_chain_file_runs():
    chain = str(ROOT / "chains" / "permissions.toml")
    assert conductor_cli("check", chain).returncode == 0
    # No --yes and no terminal: the editor would reject, so "granted" comes from the rule.
    done = conductor_cli("--log-level", "info", "prompt", chain, "ask permission")
    assert done.returncode == 0, done.stderr
    assert "Permission granted. You said: ask permission" in done.stdout
    assert "allow (rule 3)" in done.stderr


def test_recorder_chain_file_runs(tmp_path):
    chain = str(ROOT / "chains" / "recorder.toml")
    assert conductor_cli("check", chain).returncode == 0
    done = conductor_cli("prompt", chain, "--yes", "ask permission", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Permission granted. You said: ask permission" in done.stdout
    lines = read_jsonl(tmp_path / "acp-sessions" / "sess-1.jsonl")
    methods = [(m["type"], m["method"]) for m in lines]
    assert ("response", "session/request_permission") in methods
    assert methods[-1] == ("response", "session/prompt")


@pytest.mark.parametrize(
    ("spec", "options", "expected"),
    [
        (PERMISSIONS, {"rules": [{"kind": "execute"}]}, "rules[1] has no 'decision'"),
        (PERMISSIONS, {"rules": [{"decision": "maybe"}]}, "decision 'maybe' is not one of"),
        (PERMISSIONS, {"rules": [{"tool": "x", "decision": "allow"}]}, "unknown key(s) ['tool']"),
        (PERMISSIONS, {"rules": [{"kind": "exec", "decision": "allow"}]}, "kind 'exec' is not"),
        (PERMISSIONS, {"default": "yes"}, "'default' 'yes' is not one of"),
        (PERMISSIONS, {"log_file": "/no/such/dir/x.jsonl"}, "its folder does not exist"),
        (RECORDER, {"folder": str(ROOT / "README.md")}, "exists and is not a folder"),
    ],
)
def test_bad_options_fail_check(make_chain, spec, options, expected):
    chain = make_chain(block(spec, "inprocess", "p", **options) + demo_agent_block())
    done = conductor_cli("check", str(chain))
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    standalone = [PY, "-m", "conductor", "proxy", spec]
    for key, value in options.items():
        standalone += ["-o", f"{key}={json.dumps(value)}"]
    done = subprocess.run(standalone, capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert done.returncode == 2 and expected in done.stderr, done.stderr


# ----------------------------------- plugin machinery (regressions found by these proxies)


@pytest.mark.parametrize("mode", MODES)
def test_traffic_behind_an_awaited_reply_keeps_its_order(make_chain, conductor, tmp_path, mode):
    record = tmp_path / "agent.jsonl"
    proxy = block(RECORDER, mode, "rec", folder=str(tmp_path / "sessions"))
    peer = conductor(make_chain(proxy + demo_agent_block("--record", str(record))))
    session = start_session(peer)
    rounds = 12
    after = {"jsonrpc": "2.0", "method": "_test/after", "params": {"sessionId": session}}
    for n in range(rounds):
        peer.request(f"p{n}", "session/prompt", prompt_params(session, "ask permission"))
        _, asked = peer.read_until(lambda m: m.get("method") == "session/request_permission")
        # The editor answers and sends notifications right behind the answer, in one write.
        burst = [allow_reply(asked), after, after, after]
        peer.send_raw("\n".join(json.dumps(m) for m in burst).encode())
        peer.response(f"p{n}")
    peer.close_stdin()
    peer.wait()
    got = [m for m in read_jsonl(record) if "result" in m or m.get("method") == "_test/after"]
    order = ["after" if "method" in m else "answer" for m in got]
    overtaken = sum(order[i * 4] != "answer" for i in range(rounds))
    assert overtaken == 0, f"the answer was overtaken in {overtaken} of {rounds} rounds: {order}"


@pytest.mark.parametrize("mode", MODES)
def test_observed_params_reach_the_agent_byte_for_byte(make_chain, conductor, tmp_path, mode):
    record = tmp_path / "agent.jsonl"
    proxy = block(RECORDER, mode, "rec", folder=str(tmp_path / "sessions"))
    peer = conductor(make_chain(proxy + demo_agent_block("--record", str(record))))
    session = start_session(peer)
    params = (
        b'{"sessionId":"%s","prompt":[{"type":"text","text":"hi"}],'
        b'"_meta":{"big":123456789012345678901234567890,"f":1.0e5}}' % session.encode()
    )
    peer.send_raw(b'{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":' + params + b"}")
    peer.response(5)
    peer.close_stdin()
    peer.wait()
    assert any(params in line for line in record.read_bytes().splitlines())
