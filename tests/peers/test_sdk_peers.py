"""The official-SDK test peers (sdk_client.py, sdk_echo_agent.py) talking directly to each other."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import texts

PEERS = Path(__file__).resolve().parent
SDK_CLIENT = PEERS / "sdk_client.py"
ECHO_AGENT = [sys.executable, str(PEERS / "sdk_echo_agent.py")]


def run_client(
    *client_args: str, agent: list[str] | None = None, timeout: float = 60
) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(
        [sys.executable, str(SDK_CLIENT), *client_args, "--", *(agent or ECHO_AGENT)],
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    return proc.returncode, events, proc.stderr.decode("utf-8", "replace")


def test_echo_two_prompts() -> None:
    rc, events, stderr = run_client("--prompt", "hello world", "--prompt", "again")
    assert rc == 0, stderr
    assert [e["event"] for e in events] == [
        "initialize",
        "session_new",
        "update",
        "update",
        "prompt_response",
        "update",
        "update",
        "prompt_response",
    ]
    init = events[0]["result"]
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "sdk-echo-agent"
    session_id = events[1]["result"]["sessionId"]
    assert all(e["params"]["sessionId"] == session_id for e in events if e["event"] == "update")
    assert texts(events) == ["Echo: ", "hello world", "Echo: ", "again"]
    assert events[4]["result"] == {"stopReason": "end_turn"}


@pytest.mark.parametrize(
    ("mode", "option_id"), [("allow", "allow"), ("reject", "reject"), ("first", "allow")]
)
def test_permission_round_trip(mode: str, option_id: str) -> None:
    prompt = "may I have permission?"
    rc, events, stderr = run_client("--permission", mode, "--prompt", prompt)
    assert rc == 0, stderr
    kinds = [e["event"] for e in events]
    assert kinds == ["initialize", "session_new", "permission", *["update"] * 3, "prompt_response"]
    permission = events[2]
    assert permission["params"]["sessionId"] == events[1]["result"]["sessionId"]
    assert [o["kind"] for o in permission["params"]["options"]] == ["allow_once", "reject_once"]
    assert permission["answer"] == {"outcome": {"outcome": "selected", "optionId": option_id}}
    assert texts(events) == ["Echo: ", prompt, f" [permission: {option_id}]"]
    assert events[-1]["result"]["stopReason"] == "end_turn"


def test_multi_megabyte_prompt_round_trip(tmp_path: Path) -> None:
    big = "0123456789abcdef" * (4 * 1024 * 1024 // 16)  # 4 MiB, well above 64 KiB reader limits
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(big, encoding="utf-8")
    rc, events, stderr = run_client("--prompt-file", str(prompt_file))
    assert rc == 0, stderr
    assert texts(events) == ["Echo: ", big]


def test_missing_agent_command_is_an_error() -> None:
    rc, events, _ = run_client("--prompt", "x", agent=["/nonexistent/agent-binary"])
    assert rc == 1
    assert events[-1]["event"] == "error"


def test_timeout_does_not_hang() -> None:
    silent_agent = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    rc, events, _ = run_client("--timeout", "1", "--prompt", "x", agent=silent_agent, timeout=30)
    assert rc == 1
    assert events[-1]["event"] == "error"
    assert "timed out" in events[-1]["error"]["message"]
    assert time.monotonic() - started < 20
