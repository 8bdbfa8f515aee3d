"""End to end with the official ACP TypeScript SDK (``@agentclientprotocol/sdk``) as real peers.

The TS client (tests/interop/ts_client.mjs) talks to the TS echo agent
(tests/interop/ts_agent.mjs), the built-in demo agent or the official Python SDK's echo agent
(tests/peers/sdk_echo_agent.py, v1 only), directly and through ``conductor run CHAIN`` with
pass-through proxies (subprocess, in-process and mixed), over ACP v1 and draft v2; the
transcripts must be identical. The TS client also runs the example agent shipped in the npm
package ``@zed-industries/agent-client-protocol`` (typescript/examples/agent.ts, run with tsx)
directly and through 0 and 3 proxies. The official Python SDK client also talks to the TS agent
through the conductor. The SDK, that package and tsx are pinned in tests/interop/package.json
(and its lock file); install them with ``npm ci --prefix tests/interop``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ECHO_WITH_PERMISSION_EVENTS,
    PY,
    ROOT,
    chain_around,
    conductor_command,
    texts,
)

INTEROP = ROOT / "tests" / "interop"
TS_CLIENT = INTEROP / "ts_client.mjs"
TS_AGENT = INTEROP / "ts_agent.mjs"
SDK_PACKAGE = INTEROP / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
SDK_CLIENT = ROOT / "tests" / "peers" / "sdk_client.py"
SDK_ECHO_AGENT = ROOT / "tests" / "peers" / "sdk_echo_agent.py"
SDK_VERSION = "2.4.0"
# The example agent shipped (as TypeScript source, run with tsx) in the older npm package
# @zed-industries/agent-client-protocol: text chunks, tool calls, a permission request.
ZED_PACKAGE = INTEROP / "node_modules" / "@zed-industries" / "agent-client-protocol"
ZED_AGENT = ZED_PACKAGE / "typescript" / "examples" / "agent.ts"
TSX_CLI = INTEROP / "node_modules" / "tsx" / "dist" / "cli.mjs"

PROMPTS = ["hello world", "may I have permission to echo?"]
CLIENT_TIMEOUT = 20.0


def node() -> str:
    """The node executable, failing (never skipping) when the TS SDK is not installed."""
    path = shutil.which("node")
    if path is None:
        pytest.fail("node (v20+) is not on PATH; it is needed to run the TypeScript SDK peers")
    if not SDK_PACKAGE.exists():
        pytest.fail(
            "the ACP TypeScript SDK is not installed: run `npm ci --prefix tests/interop`",
            pytrace=False,
        )
    version = json.loads(SDK_PACKAGE.read_text())["version"]
    if version != SDK_VERSION:
        pytest.fail(
            f"tests/interop has @agentclientprotocol/sdk {version}, expected {SDK_VERSION}: "
            "run `npm ci --prefix tests/interop`",
            pytrace=False,
        )
    return path


def zed_example_agent() -> list[str]:
    """The command running the example agent of @zed-industries/agent-client-protocol."""
    executable = node()
    if not ZED_AGENT.exists() or not TSX_CLI.exists():
        pytest.fail(
            "@zed-industries/agent-client-protocol or tsx is missing from tests/interop: "
            "run `npm ci --prefix tests/interop`",
            pytrace=False,
        )
    return [executable, str(TSX_CLI), str(ZED_AGENT)]


def agent_command(agent: str, version: int) -> list[str]:
    if agent == "ts":
        return [node(), str(TS_AGENT), *(["--v2"] if version == 2 else [])]
    if agent == "sdk":
        return [PY, str(SDK_ECHO_AGENT)]  # the official Python SDK's echo agent (v1 only)
    return [PY, "-m", "conductor.demo_agent"]


LAYOUTS = {
    "0 proxies": [],
    "1 proxy": ["sub"],
    "3 proxies": ["sub", "sub", "sub"],
    "3 in-process": ["plugin", "plugin", "plugin"],
    "mixed": ["plugin", "sub", "plugin"],
}


class Run:
    def __init__(self, label: str, proc: subprocess.CompletedProcess[bytes]) -> None:
        self.label = label
        self.returncode = proc.returncode
        self.stdout = proc.stdout.decode("utf-8")
        self.stderr = proc.stderr.decode("utf-8", "replace")
        self.events: list[dict[str, Any]] = [json.loads(line) for line in self.stdout.splitlines()]

    def describe(self) -> str:
        return (
            f"{self.label}: exit status {self.returncode}\n--- transcript (tail) ---\n"
            f"{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def run(label: str, argv: list[str]) -> Run:
    proc = subprocess.run(
        argv, capture_output=True, cwd=ROOT, timeout=CLIENT_TIMEOUT + 15, check=False
    )
    return Run(label, proc)


def prompt_args(prompts: list[str]) -> list[str]:
    return [arg for text in prompts for arg in ("--prompt", text)]


def ts_client(label: str, command: list[str], version: int, prompts: list[str] = PROMPTS) -> Run:
    argv = [node(), str(TS_CLIENT), "--timeout", str(CLIENT_TIMEOUT), "--cwd", "/tmp"]
    if version == 2:
        argv.append("--v2")
    return run(label, [*argv, *prompt_args(prompts), "--", *command])


def normalize_session_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace each session id the agent minted (a random UUID in the TS agent) by a label."""
    text = json.dumps(events)
    for n, event in enumerate(e for e in events if e["event"] == "session_new"):
        text = text.replace(json.dumps(event["result"]["sessionId"]), f'"<session-{n + 1}>"')
    normalized: list[dict[str, Any]] = json.loads(text)
    return normalized


def diff(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> str:
    lines = [f"{len(expected)} vs {len(got)} events"]
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            lines.append(f"  [{i}] direct:  {json.dumps(a, sort_keys=True)}")
            lines.append(f"  [{i}] through: {json.dumps(b, sort_keys=True)}")
    return "\n".join(lines)


def check_direct_transcript(agent: str, version: int, direct: Run) -> None:
    """Sanity checks, so that identical transcripts mean something."""
    events = direct.events
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["initialize", "session_new"], direct.describe()
    assert kinds.count("permission") == 1, direct.describe()
    assert kinds.count("prompt_response") == 2, direct.describe()
    assert kinds[-1] == "prompt_response", direct.describe()
    assert "error" not in kinds, direct.describe()
    assert events[0]["result"]["protocolVersion"] == version, direct.describe()
    permission = next(e for e in events if e["event"] == "permission")
    assert permission["answer"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    if agent in ("ts", "sdk"):
        assert texts(events) == ["Echo: ", PROMPTS[0], "Echo: ", PROMPTS[1], " [permission: allow]"]
    else:
        joined = "".join(texts(events))
        assert joined == f"You said: {PROMPTS[0]}Permission granted. You said: {PROMPTS[1]}"
    if version == 2:
        states = [
            e["params"]["update"].get("state")
            for e in events
            if e["event"] == "update" and e["params"]["update"]["sessionUpdate"] == "state_update"
        ]
        assert states == ["running", "idle", "running", "requires_action", "running", "idle"]
        responses = [e["result"] for e in events if e["event"] == "prompt_response"]
        user_messages = [
            e["params"]["update"]["messageId"]
            for e in events
            if e["event"] == "update" and e["params"]["update"]["sessionUpdate"] == "user_message"
        ]
        assert responses == [{"messageId": m} for m in user_messages], direct.describe()
    else:
        responses = [e["result"] for e in events if e["event"] == "prompt_response"]
        assert responses == [{"stopReason": "end_turn"}] * 2, direct.describe()


# Every agent with every protocol version it speaks (the Python SDK's agent speaks only v1).
PAIRINGS = [("ts", 1), ("ts", 2), ("demo", 1), ("demo", 2), ("sdk", 1)]


@pytest.mark.parametrize(("agent", "version"), PAIRINGS, ids=[f"v{v}-{a}" for a, v in PAIRINGS])
def test_ts_client_transcripts_identical_direct_and_through_conductor(
    tmp_path: Path, agent: str, version: int
) -> None:
    command = agent_command(agent, version)
    direct = ts_client("direct", command, version)
    assert direct.returncode == 0, direct.describe()
    check_direct_transcript(agent, version, direct)
    expected = normalize_session_ids(direct.events)

    chains = {
        label: chain_around(tmp_path, command, layout, f"chain{i}.toml")
        for i, (label, layout) in enumerate(LAYOUTS.items())
    }
    with ThreadPoolExecutor(len(chains)) as pool:
        runs = list(
            pool.map(
                lambda label: ts_client(label, conductor_command(chains[label]), version), chains
            )
        )
    failures = []
    for through in runs:
        if through.returncode != 0:
            failures.append(through.describe())
            continue
        got = normalize_session_ids(through.events)
        if got != expected:
            failures.append(f"{through.label}: transcripts differ: {diff(expected, got)}")
    assert not failures, f"{agent} agent, v{version}:\n" + "\n\n".join(failures)


def test_python_sdk_client_through_two_proxies_to_ts_agent(tmp_path: Path) -> None:
    chain = chain_around(tmp_path, agent_command("ts", 1), 2, "chain.toml")
    argv = [PY, str(SDK_CLIENT), "--timeout", str(CLIENT_TIMEOUT), "--permission", "allow"]
    result = run(
        "python sdk client", [*argv, *prompt_args(PROMPTS), "--", *conductor_command(chain)]
    )
    assert result.returncode == 0, result.describe()
    kinds = [e["event"] for e in result.events]
    assert kinds == ECHO_WITH_PERMISSION_EVENTS, result.describe()
    assert result.events[0]["result"]["agentInfo"]["name"] == "ts-echo-agent"
    session_id = result.events[1]["result"]["sessionId"]
    assert all(e["params"]["sessionId"] == session_id for e in result.events if "params" in e)
    permission = result.events[5]
    assert permission["params"]["toolCall"]["rawInput"] == {"text": PROMPTS[1]}
    assert [o["optionId"] for o in permission["params"]["options"]] == ["allow", "reject"]
    assert permission["answer"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert texts(result.events) == [
        "Echo: ",
        PROMPTS[0],
        "Echo: ",
        PROMPTS[1],
        " [permission: allow]",
    ]
    assert result.events[4]["result"] == {"stopReason": "end_turn"}
    assert result.events[-1]["result"] == {"stopReason": "end_turn"}


def test_ts_client_with_zed_example_agent_direct_and_through_conductor(tmp_path: Path) -> None:
    """The example agent of @zed-industries/agent-client-protocol sleeps 1 s between updates
    (about 5 s a turn): one prompt, and the direct run alongside the chains."""
    command = zed_example_agent()
    chains = {
        label: chain_around(tmp_path, command, proxies, f"chain{proxies}.toml")
        for label, proxies in [("0 proxies", 0), ("3 proxies", 3)]
    }
    commands = {"direct": command, **{k: conductor_command(v) for k, v in chains.items()}}
    with ThreadPoolExecutor(len(commands)) as pool:
        direct, *runs = pool.map(
            lambda label: ts_client(label, commands[label], 1, PROMPTS[:1]), commands
        )

    assert direct.returncode == 0, direct.describe()
    events = direct.events
    kinds = [e["event"] for e in events]
    assert kinds == [
        "initialize",
        "session_new",
        *["update"] * 5,
        "permission",
        *["update"] * 2,
        "prompt_response",
    ], direct.describe()
    assert events[0]["result"]["protocolVersion"] == 1
    updates = [e["params"]["update"]["sessionUpdate"] for e in events if e["event"] == "update"]
    assert updates == [
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert events[7]["params"]["toolCall"]["toolCallId"] == "call_2"
    assert events[7]["answer"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert texts(events)[-1].startswith(" Perfect!")
    assert events[-1]["result"] == {"stopReason": "end_turn"}
    expected = normalize_session_ids(events)

    failures = []
    for through in runs:
        if through.returncode != 0:
            failures.append(through.describe())
        elif (got := normalize_session_ids(through.events)) != expected:
            failures.append(f"{through.label}: transcripts differ: {diff(expected, got)}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("agent", ["ts", "demo", "sdk"])
def test_python_sdk_client_transcripts_identical_across_layouts(tmp_path: Path, agent: str) -> None:
    """The official Python SDK client, against each agent, directly and through every layout."""
    command = agent_command(agent, 1)
    argv = [PY, str(SDK_CLIENT), "--timeout", str(CLIENT_TIMEOUT), "--permission", "allow"]

    def client(label: str, target: list[str]) -> Run:
        return run(label, [*argv, *prompt_args(PROMPTS), "--", *target])

    direct = client("direct", command)
    assert direct.returncode == 0, direct.describe()
    assert [e["event"] for e in direct.events].count("prompt_response") == 2, direct.describe()
    expected = normalize_session_ids(direct.events)
    chains = {
        label: chain_around(tmp_path, command, layout, f"py{i}.toml")
        for i, (label, layout) in enumerate(LAYOUTS.items())
    }
    with ThreadPoolExecutor(len(chains)) as pool:
        runs = list(pool.map(lambda label: client(label, conductor_command(chains[label])), chains))
    failures = [
        through.describe()
        if through.returncode != 0
        else f"{through.label}: transcripts differ: {diff(expected, normalize_session_ids(through.events))}"
        for through in runs
        if through.returncode != 0 or normalize_session_ids(through.events) != expected
    ]
    assert not failures, f"python client, {agent} agent:\n" + "\n\n".join(failures)
