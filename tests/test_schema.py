"""Everything the conductor emits, on every hop, validated against the official ACP schemas.

One scenario (initialize, session/new, a prompt with a permission request answered "allow", a
prompt cancelled with `session/cancel` mid-stream, one cancelled while its permission request
is pending, one cancelled with `$/cancel_request`, an unknown `_vendor/x` request, batches, and
the conductor's own errors) runs through real chains of 0, 1 and 2 pass-through proxies in
front of the demo agent, in protocol v1 and v2, and with `dialect = "plain"`. Then:

* what the editor read from the conductor is checked as agent-side traffic;
* what each proxy received (its `--log`) is checked as client-side traffic: `_proxy/initialize`
  against InitializeProxyRequest, `_proxy/successor` against ProxySuccessor{Request,
  Notification} plus the wrapped message against its own def, responses against the response
  def of the proxy's request (its `--log-out`);
* what the agent received (its `--record`) is checked as client-side traffic, responses against
  the response def of the agent's request (its stdout, teed to a file).

See tests/schema_check.py for how each message's def is chosen. A violation names the hop, the
def and the error; nothing here is skipped: CI always has the schemas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from conftest import PY, Peer, agent_text, init_params, prompt_params, proxy_block, toml_list
from schema_check import (
    AGENT,
    CLIENT,
    REPO,
    SchemaViolation,
    Validator,
    schema_candidates,
    schema_dir,
    validator,
)

# Runs the command after the log file name with stdout teed to that file (stdin, stderr and
# the exit status are the child's): the agent's own requests are needed to check the
# conductor's responses to them.
TEE = """\
import subprocess, sys
log = open(sys.argv[1], "ab")
child = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE)
for line in child.stdout:
    log.write(line)
    log.flush()
    try:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        break
sys.exit(child.wait())
"""


class Editor:
    """The test's side of the conductor's stdio: what it reads is schema-checked."""

    def __init__(self, peer: Peer, version: int) -> None:
        self.peer = peer
        self.schema = validator(version)
        self.violations: list[str] = []
        self.used: set[str] = set()

    def send(self, message: Any, valid: bool = True) -> None:
        if valid:  # the test's own traffic must be valid, or a violation could be ours
            self.schema.check_message(message, CLIENT)
        else:
            self.schema.record(message, CLIENT)
        self.peer.send(message)

    def request(self, req_id: Any, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def read(self) -> Any:
        message = self.peer.read()
        try:
            self.used.update(self.schema.check_message(message, AGENT))
        except SchemaViolation as exc:
            self.violations.append(f"conductor -> editor: {exc}")
        return message

    def read_until(self, predicate: Callable[[Any], bool]) -> tuple[list[Any], Any]:
        seen = []
        while not predicate(message := self.read()):
            seen.append(message)
        return seen, message

    def response(self, req_id: Any) -> tuple[list[Any], Any]:
        return self.read_until(
            lambda m: isinstance(m, dict) and "method" not in m and m.get("id") == req_id
        )


def is_update(kind: str) -> Callable[[Any], bool]:
    return lambda m: (
        isinstance(m, dict)
        and m.get("method") == "session/update"
        and m["params"]["update"].get("sessionUpdate") == kind
    )


def is_request(method: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, dict) and m.get("method") == method and "id" in m


def stop_reason(version: int, before: list[Any], response: dict[str, Any]) -> Any:
    """The turn's stop reason: the v1 result, or the v2 final idle state update."""
    if version == 1:
        return response["result"]["stopReason"]
    assert "messageId" in response["result"], response
    states = [m for m in before if is_update("state_update")(m)]
    assert states and states[-1]["params"]["update"]["state"] == "idle", states
    return states[-1]["params"]["update"].get("stopReason")


def scenario(editor: Editor, version: int) -> None:
    """Drive one chain through every kind of traffic the conductor relays or makes up."""
    # The conductor's own errors: unparsable input, then a refused initialize.
    editor.peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    _, response = editor.response(None)
    assert response["error"]["code"] == -32700, response
    editor.send(
        {"jsonrpc": "2.0", "id": "bad", "method": "initialize", "params": {"protocolVersion": "1"}},
        valid=False,
    )
    _, response = editor.response("bad")
    assert response["error"]["code"] == -32602, response

    editor.request(0, "initialize", init_params(version))
    _, response = editor.response(0)
    assert response["result"]["protocolVersion"] == version, response
    editor.request(1, "session/new", {"cwd": "/tmp", "mcpServers": []})
    _, response = editor.response(1)
    session = response["result"]["sessionId"]

    # A permission request travels up every hop; the editor allows it.
    editor.request(2, "session/prompt", prompt_params(session, "ask permission please"))
    _, permission = editor.read_until(is_request("session/request_permission"))
    allow = next(
        o["optionId"] for o in permission["params"]["options"] if o["kind"] == "allow_once"
    )
    outcome = {"outcome": {"outcome": "selected", "optionId": allow}}
    editor.send({"jsonrpc": "2.0", "id": permission["id"], "result": outcome})
    before, response = editor.response(2)
    assert "Permission granted" in agent_text(before)
    assert stop_reason(version, before, response) == "end_turn"

    # session/cancel in the middle of a streamed reply.
    editor.request(3, "session/prompt", prompt_params(session, "go slow please"))
    editor.read_until(is_update("agent_message_chunk"))
    editor.notify("session/cancel", {"sessionId": session})
    before, response = editor.response(3)
    assert stop_reason(version, before, response) == "cancelled"

    # session/cancel while the permission request is pending: the agent withdraws it with
    # $/cancel_request, translated hop by hop up to the editor, which answers it "cancelled".
    editor.request(4, "session/prompt", prompt_params(session, "permission again"))
    _, permission = editor.read_until(is_request("session/request_permission"))
    editor.notify("session/cancel", {"sessionId": session})
    before, response = editor.response(4)
    cancels = [m for m in before if m.get("method") == "$/cancel_request"]
    assert [m["params"]["requestId"] for m in cancels] == [permission["id"]]
    assert stop_reason(version, before, response) == "cancelled"
    error = {"code": -32800, "message": "Request cancelled"}
    editor.send({"jsonrpc": "2.0", "id": permission["id"], "error": error})

    # $/cancel_request for a streaming prompt: the agent answers it with an error.
    editor.request(5, "session/prompt", prompt_params(session, "slow again"))
    editor.read_until(is_update("agent_message_chunk"))
    editor.notify("$/cancel_request", {"requestId": 5})
    _, response = editor.response(5)
    assert response["error"]["code"] == -32800, response

    # An unknown extension request gets an error response.
    editor.request(6, "_vendor/x", {"a": 1})
    _, response = editor.response(6)
    assert response["error"]["code"] == -32601, response

    # A batch: relayed requests, a notification, an invalid entry the conductor answers.
    batch = [
        {"jsonrpc": "2.0", "id": "b1", "method": "_demo/echo", "params": {"n": 1}},
        {"jsonrpc": "2.0", "method": "_vendor/note", "params": {"n": 2}},
        42,
        {
            "jsonrpc": "2.0",
            "id": "b2",
            "method": "session/new",
            "params": {"cwd": "/", "mcpServers": []},
        },
        {"jsonrpc": "2.0", "id": "b3", "method": "_vendor/x", "params": []},
    ]
    editor.send(batch, valid=False)
    _, answers = editor.read_until(lambda m: isinstance(m, list))
    by_id = {a.get("id"): a for a in answers}
    assert set(by_id) == {None, "b1", "b2", "b3"}, answers
    assert by_id["b1"]["result"] == {"params": {"n": 1}}
    assert "sessionId" in by_id["b2"]["result"]
    assert by_id["b3"]["error"]["code"] == -32601
    assert by_id[None]["error"]["code"] == -32600
    editor.peer.send_raw(b"[]")
    _, response = editor.response(None)
    assert response["error"]["code"] == -32600, response


def check_hop(version: int, label: str, received: Path, sent: Path) -> tuple[list[str], set[str]]:
    """Check every line the conductor wrote to a component (`received` by it), matching
    responses to the component's own requests (`sent` by it). Returns violations, defs used."""
    schema = validator(version)
    for line in sent.read_bytes().splitlines():
        schema.record(json.loads(line), AGENT)
    violations: list[str] = []
    used: set[str] = set()
    lines = received.read_bytes().splitlines()
    assert lines, f"{label} received nothing"
    for n, line in enumerate(lines, 1):
        try:
            message = json.loads(line)
        except ValueError as exc:
            violations.append(f"conductor -> {label}, line {n}: not JSON ({exc}): {line[:300]!r}")
            continue
        try:
            used.update(schema.check_message(message, CLIENT))
        except SchemaViolation as exc:
            violations.append(f"conductor -> {label}, line {n}: {exc}")
    return violations, used


def methods_received(path: Path) -> set[str]:
    return {json.loads(line).get("method") for line in path.read_bytes().splitlines()} - {None}


# The defs each hop must have exercised, so that a scenario change cannot make this vacuous.
V1_CANCEL, V2_CANCEL = "CancelNotification", "CancelSessionNotification"
V1_UPDATE, V2_UPDATE = "SessionNotification", "UpdateSessionNotification"


def expected_defs(version: int, hop: str) -> set[str]:
    update = V1_UPDATE if version == 1 else V2_UPDATE
    cancel = V1_CANCEL if version == 1 else V2_CANCEL
    if hop == "editor":
        return {
            "AgentResponse",
            "AgentRequest",
            "AgentNotification",
            "Error",
            "InitializeResponse",
            "NewSessionResponse",
            "PromptResponse",
            "RequestPermissionRequest",
            "CancelRequestNotification",
            update,
        }
    common = {
        "ClientRequest",
        "ClientNotification",
        "ClientResponse",
        "NewSessionRequest",
        "PromptRequest",
        "CancelRequestNotification",
        "RequestPermissionResponse",
        "Error",
        cancel,
    }
    if hop == "agent":
        return common | {"InitializeRequest"}
    return common | {
        "InitializeProxyRequest",
        "ProxySuccessorRequest",
        "ProxySuccessorNotification",
        "ProxySuccessorResponse",
        "RequestPermissionRequest",
        "InitializeResponse",
        "NewSessionResponse",
        "PromptResponse",
        update,
    }


CASES = [
    pytest.param(version, proxies, dialect, id=f"v{version}-{proxies}proxies-{dialect}")
    for version in (1, 2)
    for proxies, dialect in ((0, "underscore"), (1, "underscore"), (2, "underscore"), (2, "plain"))
]


@pytest.mark.parametrize(("version", "proxies", "dialect"), CASES)
def test_everything_the_conductor_emits_is_schema_valid(
    make_chain: Any, conductor: Any, tmp_path: Path, version: int, proxies: int, dialect: str
) -> None:
    schema_dir()  # fail first, and clearly, without the schemas
    tee = tmp_path / "tee_stdout.py"
    tee.write_text(TEE)
    logs = [(tmp_path / f"p{i}-in.jsonl", tmp_path / f"p{i}-out.jsonl") for i in range(proxies)]
    text = ""
    for i, (log_in, log_out) in enumerate(logs):
        args = ["--log", str(log_in), "--log-out", str(log_out), "--name", f"p{i}"]
        if dialect == "plain":
            text += proxy_block(*args, "--dialect", "plain", name=f"p{i}", dialect="plain")
        else:
            text += proxy_block(*args, name=f"p{i}")
    agent_in, agent_out = tmp_path / "agent-in.jsonl", tmp_path / "agent-out.jsonl"
    # Many one-character chunks: a "slow" reply streams for seconds, so cancels land mid-turn.
    demo = [PY, "-m", "conductor.demo_agent", "--chunks", "40", "--record", agent_in]
    agent = [PY, tee, agent_out, *demo]
    text += f'[agent]\nname = "demo"\ncommand = {toml_list(agent)}\n'
    peer = conductor(make_chain(text))
    editor = Editor(peer, version)
    scenario(editor, version)
    peer.close_stdin()
    assert peer.wait() == 0, peer.stderr

    violations = list(editor.violations)
    hops = [(f"proxy p{i}", log_in, log_out) for i, (log_in, log_out) in enumerate(logs)]
    hops.append(("agent", agent_in, agent_out))
    used = {"editor": editor.used}
    for label, received, sent in hops:
        found, used[label] = check_hop(version, label, received, sent)
        violations += found
    assert not violations, f"{len(violations)} schema violation(s):\n" + "\n".join(violations)

    for label, defs in used.items():
        hop = label if label in ("editor", "agent") else "proxy"
        missing = expected_defs(version, hop) - defs
        assert not missing, f"{label}: scenario did not exercise {sorted(missing)}"
    prefix = "" if dialect == "plain" else "_"
    for i, (log_in, _) in enumerate(logs):
        proxy_methods = {m for m in methods_received(log_in) if "proxy/" in m}
        assert proxy_methods == {f"{prefix}proxy/initialize", f"{prefix}proxy/successor"}, i


# -- the checker itself -------------------------------------------------------------------------


def test_schema_dir_lookup_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACP_SCHEMA_DIR", str(tmp_path))
    assert schema_candidates() == [
        tmp_path,
        REPO.parent / "shared" / "acp-schema",
        Path("/work/shared/acp-schema"),
        REPO / "tests" / "acp-schema",
    ]
    monkeypatch.delenv("ACP_SCHEMA_DIR")
    assert schema_candidates()[0] == REPO.parent / "shared" / "acp-schema"
    assert (schema_dir() / "v2" / "schema.unstable.json").is_file()


def successor(req_id: Any, method: str, params: Any, name: str = "_proxy/successor") -> Any:
    message = {"jsonrpc": "2.0", "method": name, "params": {"method": method, "params": params}}
    return message if req_id is None else {"id": req_id, **message}


@pytest.mark.parametrize("version", [1, 2])
def test_def_choice(version: int) -> None:
    v = validator(version)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "_proxy/initialize",
        "params": init_params(version),
    }
    assert v.check_message(init, CLIENT) == ["ClientRequest", "InitializeProxyRequest"]
    answer = {"protocolVersion": version, "agentCapabilities": {}}
    if version == 2:
        answer = {"protocolVersion": 2, "info": {"name": "a", "version": "1"}, "capabilities": {}}
    reply = {"jsonrpc": "2.0", "id": 1, "result": answer}
    assert v.check_message(reply, AGENT) == ["AgentResponse", "InitializeProxyResponse"]
    # What the conductor wraps for a proxy comes from the agent side, and the other way round.
    update = V1_UPDATE if version == 1 else V2_UPDATE
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
    if version == 2:
        chunk["messageId"] = "m"
    note = successor(None, "session/update", {"sessionId": "s", "update": chunk})
    assert v.check_message(note, CLIENT) == [
        "ClientNotification",
        "ProxySuccessorNotification",
        update,
    ]
    prompt = successor(7, "session/prompt", prompt_params("s", "hi"), "proxy/successor")
    assert v.check_message(prompt, AGENT) == [
        "AgentRequest",
        "ProxySuccessorRequest",
        "PromptRequest",
    ]
    result = {"stopReason": "end_turn"} if version == 1 else {"messageId": "m"}
    assert v.check_message({"jsonrpc": "2.0", "id": 7, "result": result}, CLIENT) == [
        "ClientResponse",
        "ProxySuccessorResponse",
        "PromptResponse",
    ]
    cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}}
    assert v.check_message(cancel, CLIENT)[-1] == "CancelRequestNotification"
    v.record({"jsonrpc": "2.0", "id": "e", "method": "_vendor/x"}, CLIENT)
    assert v.check_message({"jsonrpc": "2.0", "id": "e", "result": [1]}, AGENT) == ["AgentResponse"]


@pytest.mark.parametrize(
    ("message", "sender", "needle"),
    [
        ({"id": 1, "method": "_demo/echo"}, CLIENT, '"jsonrpc"'),
        ({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}, AGENT, "exactly one"),
        (
            {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
            AGENT,
            "'x' is not valid",
        ),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -1}}, AGENT, "'message' is a required"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "_a"}, CLIENT, "ClientRequest"),
        ({"jsonrpc": "2.0", "method": "session/cancel", "params": {}}, CLIENT, "sessionId"),
        ({"jsonrpc": "2.0", "method": "session/cancel", "params": {}}, AGENT, "no Notification"),
        ({"jsonrpc": "2.0", "id": 3, "result": {}}, AGENT, "never requested"),
        (successor(1, "session/prompt", {"sessionId": "s"}), AGENT, "PromptRequest"),
        (successor(1, "session/prompt", {"sessionId": "s", "prompt": []}), CLIENT, "no Request"),
        (successor(None, "$/cancel_request", {"requestId": 1}), CLIENT, "never wrapped"),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "_proxy/successor", "params": {}},
            CLIENT,
            "'method' is a",
        ),
        ({"jsonrpc": "2.0", "id": 1, "method": "_proxy/initialize", "params": {}}, CLIENT, "Proxy"),
        ([], AGENT, "empty array"),
    ],
)
def test_violations_are_caught(message: Any, sender: str, needle: str) -> None:
    with pytest.raises(SchemaViolation, match=needle.replace("(", r"\(")):
        validator(1).check_message(message, sender)


def test_results_are_checked_against_the_request_method() -> None:
    v = validator(1)
    v.record({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": {}}, CLIENT)
    with pytest.raises(SchemaViolation, match=r"PromptResponse.*stopReason"):
        v.check_message({"jsonrpc": "2.0", "id": "p", "result": {}}, AGENT)
    v.record(successor(9, "session/request_permission", {}), CLIENT)  # agent -> client, wrapped
    with pytest.raises(SchemaViolation, match="RequestPermissionResponse"):
        v.check_message({"jsonrpc": "2.0", "id": 9, "result": {"outcome": {}}}, AGENT)
    assert isinstance(v, Validator)
    with pytest.raises(jsonschema.ValidationError):
        v.check("InitializeProxyRequest", {})
