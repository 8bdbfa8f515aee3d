"""The conductor must not change an agent's conformance verdicts.

`tests/conformance.py` runs a list of probes (initialize variants, a prompt turn, cancels, a
permission round trip, unknown methods, malformed input, a batch, shutdown, stdout hygiene)
against an ACP agent command, each on a fresh process, and returns one verdict per probe. Here
each agent (the demo agent v1/v2, the official TypeScript SDK agent v1/v2, the official Python
SDK echo agent v1) is probed directly and through `conductor run CHAIN` with 0 and 2
pass-through proxies; the verdicts must be identical, except where the conductor documentedly
answers something itself (see `expected_through_conductor`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conformance import PROBES, run_probes
from conftest import PY, ROOT, chain_around, conductor_command
from test_ts_interop import TS_AGENT, node

SDK_ECHO_AGENT = ROOT / "tests" / "peers" / "sdk_echo_agent.py"

# name -> (argv, protocol version the agent speaks)
AGENTS: dict[str, tuple[list[str], int]] = {
    "demo-v1": ([PY, "-m", "conductor.demo_agent"], 1),
    "demo-v2": ([PY, "-m", "conductor.demo_agent"], 2),
    "ts-v1": (["node", str(TS_AGENT)], 1),
    "ts-v2": (["node", str(TS_AGENT), "--v2"], 2),
    "sdk-v1": ([PY, str(SDK_ECHO_AGENT)], 1),
}

# Behind 2 proxies, the probes whose traffic actually crosses the proxies to the agent (the
# others are answered at initialize or by the conductor itself): keeps the run short.
THROUGH_PROXIES = [
    "initialize v1",
    "initialize 99",
    "prompt turn",
    "session lifecycle",
    "session/cancel mid-turn",
    "$/cancel_request mid-turn",
    "permission round trip",
    "_vendor/x request",
    "vendor/x request",
    "_meta and unknown fields",
    "batch of two",
    "shutdown on stdin EOF",
    "stdout is JSON",
]

# Probes the conductor answers itself without ever asking the agent (README, "How the
# conductor behaves on the wire"; docs/interop.md, "Where drafts differ"):
CONDUCTOR_ANSWERS = {
    # It validates initialize.protocolVersion from the raw bytes before starting anything:
    # `0` is answered -32600, a non-integer -32602.
    "initialize 0": "error -32600",
    'initialize "1"': "error -32602",
    # Components start on the first initialize; a request before it is answered -32600.
    "request before initialize": "error -32600",
    # Malformed editor input gets -32700 from the conductor; the connection stays usable.
    "malformed JSON": "error -32700 id=None",
    # An object that is neither a request, a notification nor a response cannot be routed:
    # the conductor answers -32600 as JSON-RPC 2.0 asks (agents tested stay silent), and the
    # agent never sees it (README, "How the conductor behaves on the wire").
    "invalid request": "error -32600 id=1",
}

# The selected version goes to the agent, which must answer with it; otherwise the editor gets
# an error naming the mismatch (README), where a direct client sees the agent's downgrade.
VERSION_MISMATCH = "error -32603"


def pinned(verdict: str, selected: int) -> str:
    if verdict.startswith("ok v") and verdict != f"ok v{selected}":
        return VERSION_MISMATCH
    return verdict


def expected_through_conductor(direct: dict[str, str]) -> dict[str, str]:
    """The verdicts a client must see through the conductor, given the direct ones."""
    expected = {**direct, **CONDUCTOR_ANSWERS}
    expected["initialize v1"] = pinned(direct["initialize v1"], 1)
    expected["initialize v2"] = pinned(direct["initialize v2"], 2)
    # A higher integer selects v2 and is forwarded pinned to 2.
    expected["initialize 99"] = pinned(direct["initialize v2"], 2)
    # A batch is answered with one array; its entries are forwarded one by one, so each entry
    # gets what the agent answers to that request alone (session/new, then `_vendor/x`).
    expected["batch of two"] = f"array[ok, {direct['_vendor/x request']}]"
    return expected


def table(runs: dict[str, dict[str, str]]) -> str:
    labels = list(runs)
    lines = [" | ".join(["probe".ljust(26), *labels])]
    for probe in PROBES:
        lines.append(
            " | ".join([probe.ljust(26), *(runs[label].get(probe, "-") for label in labels)])
        )
    return "\n".join(lines)


@pytest.mark.parametrize("agent", list(AGENTS))
def test_conductor_keeps_verdicts(agent: str, tmp_path: Path) -> None:
    argv, version = AGENTS[agent]
    if argv[0] == "node":
        argv = [node(), *argv[1:]]
    runs = {
        "direct": (argv, None),
        "0 proxies": (conductor_command(chain_around(tmp_path, argv, 0, "chain0.toml")), None),
        "2 proxies": (
            conductor_command(chain_around(tmp_path, argv, 2, "chain2.toml")),
            THROUGH_PROXIES,
        ),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {
            label: pool.submit(run_probes, command, version, names)
            for label, (command, names) in runs.items()
        }
        verdicts = {label: future.result() for label, future in futures.items()}
    expected = expected_through_conductor(verdicts["direct"])
    report = f"{agent} verdicts:\n{table({'expected': expected, **verdicts})}"
    differences = {
        f"{label}: {probe}": (expected[probe], got)
        for label in ("0 proxies", "2 proxies")
        for probe, got in verdicts[label].items()
        if got != expected[probe]
    }
    assert not differences, f"(expected, got) {differences}\n{report}"
    # Sanity: the probes exercised the agent (a broken harness would give equal garbage).
    assert verdicts["direct"]["initialize v1" if version == 1 else "initialize v2"] == (
        f"ok v{version}"
    ), report
    assert verdicts["direct"]["prompt turn"].endswith("echoed"), report
