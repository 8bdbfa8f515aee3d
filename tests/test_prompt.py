"""`conductor prompt`: the quick start's first command, piped (no terminal)."""

from __future__ import annotations

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
