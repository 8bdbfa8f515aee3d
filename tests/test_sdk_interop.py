"""End to end with the official ACP Python SDK (``agent-client-protocol``) as real peers.

The SDK client (tests/peers/sdk_client.py) spawns ``conductor run CHAIN`` as its agent; the
chain ends in the SDK echo agent (tests/peers/sdk_echo_agent.py) or the built-in demo agent,
behind pass-through proxies. Every peer is a subprocess over real pipes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ECHO_WITH_PERMISSION_EVENTS,
    PY,
    ROOT,
    TIMEOUT,
    Peer,
    chain_around,
    conductor_command,
    prompt_params,
    start_session,
    texts,
)

PEERS = ROOT / "tests" / "peers"
SDK_CLIENT = PEERS / "sdk_client.py"
SDK_ECHO_AGENT = PEERS / "sdk_echo_agent.py"

# "python" in a chain file means the interpreter running the conductor (the venv's).
AGENTS: dict[str, list[str]] = {
    "sdk_echo": ["python", str(SDK_ECHO_AGENT)],
    "demo": ["python", "-m", "conductor.demo_agent"],
}
# The same agents launched directly by the SDK client.
DIRECT: dict[str, list[str]] = {
    "sdk_echo": [PY, str(SDK_ECHO_AGENT)],
    "demo": [PY, "-m", "conductor.demo_agent"],
}

PROMPTS = ["hello world", "may I have permission to echo?"]

# Runs COMMAND with inherited stdio, records how it ended in STATUS_FILE (its exit status and
# any signal the SDK's spawn helper sent while escalating), then exits with the same status.
EXIT_RECORDER = """
import json, os, signal, subprocess, sys
status_file, argv = sys.argv[1], sys.argv[2:]
child = subprocess.Popen(argv)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)  # only the child holds the client's pipes, so stdin EOF reaches it as is
os.dup2(null, 1)
received = []
def forward(signum, frame):
    received.append(signal.Signals(signum).name)
    child.send_signal(signum)
signal.signal(signal.SIGTERM, forward)
signal.signal(signal.SIGINT, forward)
returncode = child.wait()
with open(status_file, "w") as f:
    json.dump({"returncode": returncode, "signals": received}, f)
sys.exit(returncode if returncode >= 0 else 128 - returncode)
"""


def write_chain(folder: Path, agent: str, proxies: int, name: str = "chain.toml") -> Path:
    return chain_around(folder, list(AGENTS[agent]), proxies, name, agent_name=agent)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[bytes]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout.decode("utf-8")
        self.stderr = proc.stderr.decode("utf-8", "replace")
        self.events: list[dict[str, Any]] = [json.loads(line) for line in self.stdout.splitlines()]

    def describe(self) -> str:
        tail = self.stdout[-3000:]
        return f"exit status {self.returncode}\n--- transcript (tail) ---\n{tail}\n--- stderr ---\n{self.stderr[-5000:]}"


def run_client(command: list[str], *client_args: str, timeout: float = 30) -> Run:
    proc = subprocess.run(
        [PY, str(SDK_CLIENT), "--timeout", str(timeout), *client_args, "--", *command],
        capture_output=True,
        cwd=ROOT,
        timeout=timeout + 20,
        check=False,
    )
    return Run(proc)


def prompt_args(prompts: list[str]) -> list[str]:
    return [arg for text in prompts for arg in ("--prompt", text)]


def normalize_session_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace each session id the agent minted (random in the SDK echo agent) by a label."""
    labels: dict[str, str] = {}
    for event in events:
        if event["event"] == "session_new":
            session_id = event["result"]["sessionId"]
            labels.setdefault(session_id, f"<session-{len(labels) + 1}>")
    text = json.dumps(events)
    for session_id, label in labels.items():
        text = text.replace(json.dumps(session_id), json.dumps(label))
    normalized: list[dict[str, Any]] = json.loads(text)
    return normalized


# --------------------------------------------------------------------------------- 1. basics


@pytest.mark.parametrize(("mode", "option_id"), [("allow", "allow"), ("reject", "reject")])
def test_sdk_client_through_two_proxies_to_sdk_agent(
    tmp_path: Path, mode: str, option_id: str
) -> None:
    chain = write_chain(tmp_path, "sdk_echo", proxies=2)
    run = run_client(
        conductor_command(chain), "--permission", mode, *prompt_args(["hello through", PROMPTS[1]])
    )
    assert run.returncode == 0, run.describe()
    kinds = [e["event"] for e in run.events]
    assert kinds == ECHO_WITH_PERMISSION_EVENTS, run.describe()
    init = run.events[0]["result"]
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "sdk-echo-agent"
    session_id = run.events[1]["result"]["sessionId"]
    assert all(e["params"]["sessionId"] == session_id for e in run.events if "params" in e)
    permission = run.events[5]
    assert permission["params"]["toolCall"]["rawInput"] == {"text": PROMPTS[1]}
    assert [o["optionId"] for o in permission["params"]["options"]] == ["allow", "reject"]
    assert permission["answer"] == {"outcome": {"outcome": "selected", "optionId": option_id}}
    assert texts(run.events) == [
        "Echo: ",
        "hello through",
        "Echo: ",
        PROMPTS[1],
        f" [permission: {option_id}]",
    ]
    assert run.events[4]["result"] == {"stopReason": "end_turn"}
    assert run.events[-1]["result"] == {"stopReason": "end_turn"}


def test_chain_naming_the_venv_interpreter_runs_the_sdk_agent(tmp_path: Path) -> None:
    """A chain spelling out a venv's interpreter (a symlink) must run in that venv."""
    chain = chain_around(tmp_path, [PY, str(SDK_ECHO_AGENT)])
    run = run_client(conductor_command(chain), "--prompt", "from the venv")
    assert run.returncode == 0, run.describe()
    assert texts(run.events) == ["Echo: ", "from the venv"]


# ------------------------------------------------------------------ 2. transcript equivalence


@pytest.mark.parametrize("agent", ["sdk_echo", "demo"])
def test_transcripts_identical_direct_and_through_conductor(tmp_path: Path, agent: str) -> None:
    args = ["--permission", "allow", *prompt_args(PROMPTS)]
    direct = run_client(DIRECT[agent], *args)
    assert direct.returncode == 0, direct.describe()
    # Only the SDK echo agent's session ids legitimately differ between runs (uuid4).
    normalize = normalize_session_ids if agent == "sdk_echo" else list
    expected = normalize(direct.events)
    kinds = [e["event"] for e in expected]
    assert kinds[:2] == ["initialize", "session_new"]
    assert kinds.count("permission") == 1
    assert kinds.count("prompt_response") == 2
    for proxies in (0, 1, 3):
        chain = write_chain(tmp_path, agent, proxies, name=f"chain{proxies}.toml")
        through = run_client(conductor_command(chain), *args)
        assert through.returncode == 0, f"{proxies} proxies: {through.describe()}"
        got = normalize(through.events)
        if got != expected:
            diff = "\n".join(
                f"  [{i}] direct:  {json.dumps(a, sort_keys=True)}\n"
                f"  [{i}] through: {json.dumps(b, sort_keys=True)}"
                for i, (a, b) in enumerate(zip(expected, got, strict=False))
                if a != b
            )
            pytest.fail(
                f"{agent} with {proxies} proxies: transcripts differ "
                f"({len(expected)} vs {len(got)} events)\n{diff}\n{through.describe()}"
            )


# ---------------------------------------------------------------------- 3. big prompt


def test_multi_megabyte_prompt_through_two_proxies(tmp_path: Path) -> None:
    big = "".join(f"{i:07d} ünïcødé line\n" for i in range(4 * 1024 * 1024 // 24))
    assert len(big.encode()) > 4 * 1024 * 1024
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(big, encoding="utf-8")
    chain = write_chain(tmp_path, "sdk_echo", proxies=2)
    run = run_client(conductor_command(chain), "--prompt-file", str(prompt_file))
    assert run.returncode == 0, run.describe()[-3000:]
    chunks = texts(run.events)
    assert len(chunks) == 2, [len(c) for c in chunks]
    assert chunks[0] == "Echo: "
    assert len(chunks[1]) == len(big)
    digest = hashlib.sha256(chunks[1].encode()).hexdigest()
    assert digest == hashlib.sha256(big.encode()).hexdigest()
    assert run.events[-1] == {"event": "prompt_response", "result": {"stopReason": "end_turn"}}


# ------------------------------------------------------------------------- 4. shutdown


def test_clean_shutdown_behind_sdk_client(tmp_path: Path) -> None:
    """At the end of a session the SDK's spawn helper closes the conductor's stdin and waits
    2 s before escalating to SIGTERM: the conductor must wind the chain down (the SDK agent
    cancels its in-flight handlers when its stdin closes) and exit 0 by itself, in time."""
    chain = write_chain(tmp_path, "sdk_echo", proxies=2)
    status_file = tmp_path / "conductor-status.json"
    command = [PY, "-c", EXIT_RECORDER, str(status_file), *conductor_command(chain)]
    run = run_client(command, *prompt_args(PROMPTS))
    assert run.returncode == 0, run.describe()
    assert [e["event"] for e in run.events][-1] == "prompt_response", run.describe()
    assert texts(run.events)[-3:] == ["Echo: ", PROMPTS[1], " [permission: allow]"]
    assert not any(e["event"] == "error" for e in run.events), run.describe()
    status = json.loads(status_file.read_text())
    assert status == {"returncode": 0, "signals": []}, run.describe()
    assert "Traceback" not in run.stderr, run.stderr


@pytest.mark.parametrize("proxies", [None, 0, 2], ids=["direct", "0-proxies", "2-proxies"])
def test_prompt_in_flight_when_editor_closes_stdin_is_answered(
    tmp_path: Path, conductor: Any, proxies: int | None
) -> None:
    """An editor that sends a prompt and closes its stdin still reads stdout: talking to the
    SDK agent directly, it gets an answer (the result, or the error the SDK agent sends when
    its stdin closes and it cancels the handler). Through the conductor it must get one too."""
    if proxies is None:
        peer = Peer(DIRECT["sdk_echo"], cwd=ROOT)
    else:
        peer = conductor(write_chain(tmp_path, "sdk_echo", proxies))
    try:
        session_id = start_session(peer)
        peer.request(7, "session/prompt", prompt_params(session_id, "last words"))
        peer.close_stdin()
        returncode = peer.wait()
        messages = []
        while (line := peer.lines.get(timeout=TIMEOUT)) is not None:
            messages.append(json.loads(line))
    finally:
        peer.kill()
    answers = [m for m in messages if m.get("id") == 7 and "method" not in m]
    assert len(answers) == 1, f"answers to the prompt: {answers}\nstderr:\n{peer.stderr}"
    assert returncode == 0, peer.stderr
