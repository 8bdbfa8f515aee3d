"""`conductor prompt`: the quick start's first command, piped (no terminal)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT


def _prompt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor", "prompt", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_demo_chain_streams_the_reply_and_the_stop_reason(protocol):
    done = _prompt("--protocol", protocol, "chains/demo.toml", "hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "> You said: hello\n"
    assert "[stop reason: end_turn]" in done.stderr


def test_several_prompts_and_permissions():
    done = _prompt("--yes", "chains/demo.toml", "first", "ask permission")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "> You said: first\n> Permission granted. You said: ask permission\n"
    done = _prompt("chains/demo.toml", "ask permission")  # not a terminal: rejected
    assert "> Permission denied." in done.stdout and "rejected" in done.stderr


def test_a_dying_agent_gives_an_error_status():
    done = _prompt("chains/demo.toml", "crash")
    assert done.returncode == 1
    assert "exited with status 3" in done.stderr


def test_bad_chain_is_reported():
    done = _prompt("chains/nope.toml", "hi")
    assert done.returncode == 2 and "no such file" in done.stderr


def _pty_run(
    args: list[str], script: list[tuple[str, bytes]], timeout: float = 30
) -> tuple[int, str]:
    """Run `conductor prompt` on a pseudo-terminal; when output shows each text, type its keys."""
    import os
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is ours
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "conductor", "prompt", *args])
    output = b""
    deadline = time.monotonic() + timeout
    pending = list(script)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if pending and pending[0][0].encode() in output:
            os.write(fd, pending.pop(0)[1])
    else:
        os.kill(pid, 9)
        raise AssertionError(f"timed out; output so far:\n{output.decode(errors='replace')}")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_permission_is_asked_on_a_terminal():
    code, output = _pty_run(["chains/demo.toml", "ask permission"], [("[y/N]", b"y\r")])
    assert code == 0, output
    assert "> Permission granted. You said: ask permission" in output
    assert "\x1b[" in output  # colours on a terminal


def test_ctrl_c_cancels_the_turn_once(make_chain):
    chain = make_chain(
        '[agent]\ncommand = ["python3", "-m", "conductor.demo_agent", "--delay", "0.2", "--chunks", "40"]\n'
    )
    code, output = _pty_run([str(chain), "tell me a long story"], [("You said", b"\x03")])
    assert "[stop reason: cancelled]" in output, output
    assert code == 5


def test_json_stream_for_scripts():
    done = _prompt("--json", "chains/demo.toml", "hi")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0
    assert all("update" in line for line in lines[:-1]) and lines[-1] == {"stopReason": "end_turn"}
    assert "".join(line["update"]["content"]["text"] for line in lines[:-1]) == "> You said: hi"


def test_more_prompts_with_p_and_repl():
    done = subprocess.run(
        [sys.executable, "-m", "conductor", "prompt", "--repl", "chains/demo.toml", "-p", "one"],
        input="two\n\nthree\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "> You said: one\n> You said: two\n> You said: three\n"
    assert _prompt("chains/demo.toml").returncode == 2


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_mcp_tools_chain_round_trip(protocol):
    """demo_tools -> polyfill -> demo agent: the agent's stdio MCP client calls the proxy's tool."""
    done = _prompt(
        "--protocol",
        protocol,
        "chains/mcp-tools.toml",
        'use tool echo {"text":"hi"}',
        "-p",
        'use tool word_count {"text":"one two three"}',
        "-p",
        "use tool missing {}",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "The tool answered: hi",
        'The tool answered: {"words":3,"characters":13,"calls":1}',
        "The tool failed: no MCP server offers a tool named 'missing' (offered: ['echo', 'word_count'])",
    ]
    assert "[tool] ✓ MCP tool echo completed" in done.stderr  # titled, though the update is not
    assert done.stderr.count("completed") == 2 and "MCP tool missing failed" in done.stderr
