"""The demo agent as a subprocess over plain pipes; every message it emits is schema-checked.

Each emitted message is validated against the `$defs` entry of the negotiated ACP version
(found through `x-method`/`x-side`), so a wrong wire shape fails here, not in an editor.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from schema_check import AGENT, CLIENT, validator

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 10.0  # generous per-message bound: a broken agent fails instead of hanging


def check(version: int, name: str, value: Any) -> None:
    validator(version, unstable=False).check(name, value)


def def_name(version: int, method: str, side: str, suffix: str) -> str | None:
    return validator(version, unstable=False).def_name(method, side, suffix)


class AgentProcess:
    """One demo agent subprocess: write lines, read validated messages with timeouts."""

    def __init__(self, *args: str, version: int = 1) -> None:
        self.version = version
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conductor.demo_agent", *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.method_of: dict[Any, str] = {}
        self.schema = validator(version, unstable=False)  # stable schema: what the agent claims
        self.next_id = 100
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:
            self.method_of[msg["id"]] = msg["method"]
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def request(self, method: str, params: Any = None, req_id: Any = None) -> Any:
        if req_id is None:
            self.next_id += 1
            req_id = self.next_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return req_id

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, req_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": req_id, "result": result})

    def recv(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message from the agent within {timeout}s") from None
        assert line is not None, "agent closed stdout: " + self.stderr_text()
        assert line.endswith(b"\n")
        msg: dict[str, Any] = json.loads(line)
        if "method" not in msg and msg.get("id") in self.method_of:
            self.schema.remember(msg["id"], self.method_of[msg["id"]], CLIENT)
        self.schema.check_message(msg, AGENT)
        return msg

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """A request whose response must be the very next message."""
        req_id = self.request(method, params)
        msg = self.recv()
        assert msg.get("id") == req_id and "method" not in msg, msg
        return msg

    def initialize(self) -> dict[str, Any]:
        params: dict[str, Any] = {"protocolVersion": self.version}
        if self.version == 1:
            params["clientCapabilities"] = {}
        else:
            params["info"] = {"name": "test-client", "version": "0"}
        result: dict[str, Any] = self.call("initialize", params)["result"]
        return result

    def new_session(self, cwd: str = "/tmp") -> str:
        params: dict[str, Any] = {"cwd": cwd}
        if self.version == 1:
            params["mcpServers"] = []
        session_id: str = self.call("session/new", params)["result"]["sessionId"]
        return session_id

    def prompt(self, session_id: str, text: str, req_id: Any = None) -> Any:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return self.request("session/prompt", params, req_id)

    def close(self, timeout: float = TIMEOUT) -> int:
        """Close stdin and return the exit status; the agent must not hang."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)

    def stderr_text(self) -> str:
        if self.proc.poll() is None:
            return "(agent still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


Spawn = Callable[..., AgentProcess]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    agents: list[AgentProcess] = []

    def start(*args: str, version: int = 1) -> AgentProcess:
        agent = AgentProcess(*args, version=version)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.kill()


def chunk_text(msgs: list[dict[str, Any]]) -> str:
    return "".join(
        m["params"]["update"]["content"]["text"]
        for m in msgs
        if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )


def update_kind(msg: dict[str, Any]) -> str:
    """A short label for ordering checks: update variant (and state), or message kind."""
    if msg.get("method") == "session/update":
        update = msg["params"]["update"]
        kind: str = update["sessionUpdate"]
        if kind == "state_update":
            return f"state:{update['state']}"
        if kind in ("tool_call", "tool_call_update"):
            return f"{kind}:{update.get('status')}"
        return kind
    if "method" in msg:
        return f"request:{msg['method']}" if "id" in msg else f"notification:{msg['method']}"
    return "error" if "error" in msg else "response"


def collect_until_response(agent: AgentProcess, req_id: Any) -> list[dict[str, Any]]:
    """Messages up to and including the response to `req_id`."""
    msgs: list[dict[str, Any]] = []
    while True:
        msg = agent.recv()
        msgs.append(msg)
        if msg.get("id") == req_id and "method" not in msg:
            return msgs


def squash(kinds: list[str]) -> list[str]:
    """Collapse runs of agent_message_chunk so order checks do not depend on chunk counts."""
    out: list[str] = []
    for kind in kinds:
        if not (out and kind == out[-1] == "agent_message_chunk"):
            out.append(kind)
    return out


# -- schema sanity ----------------------------------------------------------------------------


def test_schema_validation_is_not_vacuous() -> None:
    with pytest.raises(jsonschema.ValidationError):
        check(2, "PromptResponse", {})  # v2 requires messageId
    with pytest.raises(jsonschema.ValidationError):
        check(1, "PromptResponse", {})  # v1 requires stopReason
    with pytest.raises(jsonschema.ValidationError):
        check(2, "InitializeResponse", {"protocolVersion": 2})  # v2 requires info
    assert def_name(1, "session/update", "client", "Notification") == "SessionNotification"
    assert def_name(2, "session/update", "client", "Notification") == "UpdateSessionNotification"


# -- initialization ---------------------------------------------------------------------------


def test_v1_initialize_shape(spawn: Spawn) -> None:
    agent = spawn(version=1)
    result = agent.initialize()
    assert result == {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": False,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
            "mcpCapabilities": {"http": False, "sse": False},
        },
        "authMethods": [],
        "agentInfo": {"name": "conductor-demo-agent", "version": result["agentInfo"]["version"]},
    }
    assert agent.close() == 0


def test_v2_initialize_shape_and_name_option(spawn: Spawn) -> None:
    agent = spawn("--name", "my-agent", version=2)
    result = agent.initialize()
    assert result["protocolVersion"] == 2
    assert result["info"]["name"] == "my-agent"
    assert result["capabilities"] == {"session": {}}
    assert agent.close() == 0


def test_version_negotiation(spawn: Spawn) -> None:
    agent = spawn(version=2)
    for bad in ({"protocolVersion": 0}, {"protocolVersion": "1"}, {}):
        msg = agent.call("initialize", bad)
        assert msg["error"]["code"] == -32602
    early = agent.call("session/new", {"cwd": "/tmp"})
    assert early["error"]["code"] == -32600  # not initialized yet
    msg = agent.call("initialize", {"protocolVersion": 7, "info": {"name": "c", "version": "1"}})
    assert msg["result"]["protocolVersion"] == 2
    assert agent.close() == 0


# -- prompt turns -----------------------------------------------------------------------------


def test_v1_full_turn(spawn: Spawn) -> None:
    agent = spawn(version=1)
    agent.initialize()
    session_id = agent.new_session()
    assert session_id == "sess-1"
    prompt_id = agent.prompt(session_id, "hello world")
    msgs = collect_until_response(agent, prompt_id)
    chunks = msgs[:-1]
    assert len(chunks) == 4
    assert all(m["params"]["sessionId"] == session_id for m in chunks)
    assert all("messageId" not in m["params"]["update"] for m in chunks)
    assert chunk_text(chunks) == "You said: hello world"
    assert msgs[-1]["result"] == {"stopReason": "end_turn"}
    assert agent.new_session() == "sess-2"
    assert agent.close() == 0


def test_v2_full_turn_lifecycle(spawn: Spawn) -> None:
    agent = spawn(version=2)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "hello")
    msgs = collect_until_response(agent, prompt_id)
    kinds = [update_kind(m) for m in msgs]
    assert kinds == [
        "user_message",
        "state:running",
        *["agent_message_chunk"] * 4,
        "state:idle",
        "response",
    ]
    user = msgs[0]["params"]["update"]
    assert user["content"] == [{"type": "text", "text": "hello"}]
    chunk_ids = {m["params"]["update"]["messageId"] for m in msgs[2:6]}
    assert len(chunk_ids) == 1 and user["messageId"] not in chunk_ids
    assert chunk_text(msgs) == "You said: hello"
    assert msgs[6]["params"]["update"]["stopReason"] == "end_turn"
    assert msgs[7]["result"] == {"messageId": user["messageId"]}
    listed = agent.call("session/list", {})["result"]["sessions"]
    assert listed == [{"sessionId": session_id, "cwd": "/tmp"}]
    assert agent.call("session/close", {"sessionId": session_id})["result"] == {}
    gone = agent.call("session/prompt", {"sessionId": session_id, "prompt": []})
    assert gone["error"]["code"] == -32002
    assert agent.close() == 0


def test_chunks_option(spawn: Spawn) -> None:
    agent = spawn("--chunks", "1", version=1)
    agent.initialize()
    msgs = collect_until_response(agent, agent.prompt(agent.new_session(), "one"))
    assert [update_kind(m) for m in msgs] == ["agent_message_chunk", "response"]
    assert agent.close() == 0


def test_slow_prompt_spaces_chunks(spawn: Spawn) -> None:
    agent = spawn(version=1)
    agent.initialize()
    session_id = agent.new_session()
    started = time.monotonic()
    msgs = collect_until_response(agent, agent.prompt(session_id, "go slow please"))
    assert time.monotonic() - started >= 3 * 0.2 - 0.05  # three gaps between four chunks
    assert msgs[-1]["result"] == {"stopReason": "end_turn"}
    assert agent.close() == 0


# -- permission -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("option", "word"), [("allow", "granted"), ("reject", "denied")])
def test_permission(spawn: Spawn, version: int, option: str, word: str) -> None:
    agent = spawn(version=version)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "needs permission")
    before: list[dict[str, Any]] = []
    while "id" not in (msg := agent.recv()):
        before.append(msg)
    assert msg["method"] == "session/request_permission"
    params = msg["params"]
    assert [o["optionId"] for o in params["options"]] == ["allow", "reject"]
    assert [o["kind"] for o in params["options"]] == ["allow_once", "reject_once"]
    if version == 1:
        assert [update_kind(m) for m in before] == ["tool_call:pending"]
        assert params["toolCall"]["title"] == "Demo tool"
        assert params["toolCall"]["kind"] == "execute"
    else:
        kinds = [update_kind(m) for m in before]
        assert kinds == [
            "user_message",
            "state:running",
            "tool_call_update:pending",
            "state:requires_action",
        ]
        assert params["subject"]["type"] == "tool_call"
        assert params["subject"]["toolCall"]["kind"] == "execute"
    agent.respond(msg["id"], {"outcome": {"outcome": "selected", "optionId": option}})
    after = collect_until_response(agent, prompt_id)
    status = "completed" if option == "allow" else "failed"
    expected = [f"tool_call_update:{status}", "agent_message_chunk", "response"]
    if version == 2:
        expected = ["state:running", *expected[:2], "state:idle", "response"]
    assert squash([update_kind(m) for m in after]) == expected
    assert chunk_text(after) == f"Permission {word}. You said: needs permission"
    if version == 1:
        assert after[-1]["result"] == {"stopReason": "end_turn"}
    assert agent.close() == 0


@pytest.mark.parametrize("version", [1, 2])
def test_permission_cancelled_outcome(spawn: Spawn, version: int) -> None:
    agent = spawn(version=version)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "permission?")
    while "id" not in (msg := agent.recv()):
        pass
    agent.respond(msg["id"], {"outcome": {"outcome": "cancelled"}})
    after = collect_until_response(agent, prompt_id)
    assert chunk_text(after) == ""
    if version == 1:
        assert after[-1]["result"] == {"stopReason": "cancelled"}
    else:
        assert after[-2]["params"]["update"] == {
            "sessionUpdate": "state_update",
            "state": "idle",
            "stopReason": "cancelled",
        }
    assert agent.close() == 0


@pytest.mark.parametrize("version", [1, 2])
def test_session_cancel_while_waiting_for_permission(spawn: Spawn, version: int) -> None:
    agent = spawn(version=version)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "permission")
    while "id" not in (msg := agent.recv()):
        pass
    permission_id = msg["id"]
    agent.notify("session/cancel", {"sessionId": session_id})
    after = collect_until_response(agent, prompt_id)
    assert after[0] == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": permission_id},
    }
    if version == 1:
        assert after[-1]["result"] == {"stopReason": "cancelled"}
    else:
        assert [update_kind(m) for m in after[1:]] == [
            "tool_call_update:cancelled",
            "state:idle",
            "response",
        ]
    # A late answer to the withdrawn request is ignored and the agent stays usable.
    agent.respond(permission_id, {"outcome": {"outcome": "cancelled"}})
    assert agent.call("_demo/echo", {"x": 1})["result"] == {"params": {"x": 1}}
    assert agent.close() == 0


# -- cancellation -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_session_cancel_mid_stream(spawn: Spawn, version: int) -> None:
    agent = spawn("--delay", "3", version=version)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "hello there")
    while update_kind(agent.recv()) != "agent_message_chunk":
        pass
    agent.notify("session/cancel", {"sessionId": session_id})
    after = collect_until_response(agent, prompt_id)
    assert "agent_message_chunk" not in [update_kind(m) for m in after]  # stopped after 1 of 4
    if version == 1:
        assert after == [{"jsonrpc": "2.0", "id": prompt_id, "result": {"stopReason": "cancelled"}}]
    else:
        assert after[0]["params"]["update"]["stopReason"] == "cancelled"
        assert "messageId" in after[1]["result"]
    assert agent.close() == 0


@pytest.mark.parametrize("version", [1, 2])
def test_cancel_request_for_prompt(spawn: Spawn, version: int) -> None:
    agent = spawn("--delay", "3", version=version)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "hello", req_id="prompt-1")
    while update_kind(agent.recv()) != "agent_message_chunk":
        pass
    agent.notify("$/cancel_request", {"requestId": "prompt-1"})
    after = collect_until_response(agent, prompt_id)
    assert after[-1]["error"]["code"] == -32800
    assert after[-1]["id"] == "prompt-1"
    if version == 2:
        assert [update_kind(m) for m in after] == ["state:idle", "error"]
        assert after[0]["params"]["update"]["stopReason"] == "cancelled"
    else:
        assert len(after) == 1
    assert agent.close() == 0


def test_cancel_request_for_unknown_id_is_ignored(spawn: Spawn) -> None:
    agent = spawn(version=1)
    agent.initialize()
    agent.notify("$/cancel_request", {"requestId": 12345})
    assert agent.call("_demo/echo", [1, 2])["result"] == {"params": [1, 2]}
    assert agent.close() == 0


def test_stdin_close_finishes_turn_quickly(spawn: Spawn) -> None:
    agent = spawn("--delay", "30", version=1)
    agent.initialize()
    prompt_id = agent.prompt(agent.new_session(), "bye")
    first = agent.recv()
    started = time.monotonic()
    assert agent.close() == 0
    assert time.monotonic() - started < 5
    msgs = collect_until_response(agent, prompt_id)
    assert chunk_text([first, *msgs]) == "You said: bye"
    assert msgs[-1]["result"] == {"stopReason": "end_turn"}


# -- errors and failures ----------------------------------------------------------------------


def test_malformed_json(spawn: Spawn) -> None:
    agent = spawn(version=1)
    agent.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
    msg = agent.recv()
    assert msg["id"] is None and msg["error"]["code"] == -32700
    agent.send_raw(b"42\n")
    msg = agent.recv()
    assert msg["id"] is None and msg["error"]["code"] == -32600
    agent.initialize()  # still usable
    assert agent.call("_demo/echo", {"ok": True})["result"] == {"params": {"ok": True}}
    assert agent.close() == 0


def test_unknown_method_and_notification(spawn: Spawn) -> None:
    agent = spawn(version=2)
    agent.initialize()
    msg = agent.call("nope/nothing", {"a": 1})
    assert msg["error"]["code"] == -32601
    assert msg["error"]["data"] == "nope/nothing"
    agent.notify("_unknown/notification", {"a": 1})  # silently ignored
    assert agent.call("_demo/echo")["result"] == {"params": None}
    assert agent.close() == 0


def test_crash_exit_status(spawn: Spawn) -> None:
    agent = spawn(version=1)
    agent.initialize()
    agent.prompt(agent.new_session(), "  crash\n")
    assert agent.proc.wait(timeout=TIMEOUT) == 3
    assert agent.lines.get(timeout=TIMEOUT) is None  # nothing answered the prompt
    assert "crash" in agent.stderr_text()


def test_record_exact_bytes(spawn: Spawn, tmp_path: Path) -> None:
    record = tmp_path / "wire.jsonl"
    agent = spawn("--record", str(record), version=1)
    lines = [
        b'{"params":{"protocolVersion":1,"clientCapabilities":{}},"method":"initialize",'
        b'"id":0,"jsonrpc":"2.0"}',
        b'{ "jsonrpc" : "2.0", "id" : "e", "method" : "_demo/echo",'
        b' "params" : {"n": 1.50, "s": "\\u00e9\xc3\xa9", "z": -0} }\r',
        b"not json at all",
    ]
    agent.method_of.update({0: "initialize", "e": "_demo/echo"})
    agent.send_raw(b"\n".join(lines) + b"\n")
    assert agent.recv()["result"]["protocolVersion"] == 1
    echoed = agent.recv()
    assert echoed["result"]["params"]["s"] == "\u00e9\u00e9"
    assert agent.recv()["error"]["code"] == -32700
    assert agent.close() == 0
    assert record.read_bytes() == b"\n".join(lines) + b"\n"


# -- v2 sessions ------------------------------------------------------------------------------


def test_v2_resume_replays_history(spawn: Spawn) -> None:
    agent = spawn(version=2)
    agent.initialize()
    session_id = agent.new_session("/work")
    other = agent.new_session("/elsewhere")
    first = collect_until_response(agent, agent.prompt(session_id, "first"))
    second = collect_until_response(agent, agent.prompt(session_id, "second"))
    user_ids = [
        first[0]["params"]["update"]["messageId"],
        second[0]["params"]["update"]["messageId"],
    ]
    agent_ids = [
        first[2]["params"]["update"]["messageId"],
        second[2]["params"]["update"]["messageId"],
    ]
    assert agent.call("session/close", {"sessionId": session_id})["result"] == {}
    listed = agent.call("session/list", {"cwd": "/work"})["result"]["sessions"]
    assert [s["sessionId"] for s in listed] == [session_id]

    params = {"sessionId": session_id, "cwd": "/work", "replayFrom": {"type": "start"}}
    resume_id = agent.request("session/resume", params)
    msgs = collect_until_response(agent, resume_id)
    assert msgs[-1]["result"] == {}
    assert [m["params"]["update"] for m in msgs[:-1]] == [
        {
            "sessionUpdate": "user_message",
            "messageId": user_ids[0],
            "content": [{"type": "text", "text": "first"}],
        },
        {
            "sessionUpdate": "agent_message",
            "messageId": agent_ids[0],
            "content": [{"type": "text", "text": "You said: first"}],
        },
        {
            "sessionUpdate": "user_message",
            "messageId": user_ids[1],
            "content": [{"type": "text", "text": "second"}],
        },
        {
            "sessionUpdate": "agent_message",
            "messageId": agent_ids[1],
            "content": [{"type": "text", "text": "You said: second"}],
        },
    ]
    # Without replayFrom nothing is replayed; unknown sessions and cursors are errors.
    assert agent.call("session/resume", {"sessionId": other, "cwd": "/elsewhere"})["result"] == {}
    missing = agent.call("session/resume", {"sessionId": "sess-99", "cwd": "/"})
    assert missing["error"]["code"] == -32002
    assert missing["error"]["data"] == {"sessionId": "sess-99"}
    bad = {"sessionId": other, "cwd": "/", "replayFrom": {"type": "_later"}}
    assert agent.call("session/resume", bad)["error"]["code"] == -32602
    # The resumed session takes prompts again.
    again = collect_until_response(agent, agent.prompt(session_id, "third"))
    assert chunk_text(again) == "You said: third"
    assert agent.close() == 0


def test_v2_close_cancels_active_turn(spawn: Spawn) -> None:
    agent = spawn("--delay", "3", version=2)
    agent.initialize()
    session_id = agent.new_session()
    prompt_id = agent.prompt(session_id, "long")
    while update_kind(agent.recv()) != "agent_message_chunk":
        pass
    close_id = agent.request("session/close", {"sessionId": session_id})
    msgs = collect_until_response(agent, close_id)
    assert [update_kind(m) for m in msgs] == ["state:idle", "response", "response"]
    assert msgs[1]["id"] == prompt_id and "messageId" in msgs[1]["result"]
    assert msgs[2]["result"] == {}
    assert agent.close() == 0
