"""Chain files: every bad file is one clear paragraph, exit status 2, nothing spawned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from conductor.chain import load_chain


def _conductor(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "conductor", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


BAD_FILES = [
    ("toml syntax", "[agent\ncommand = []\n", ["invalid TOML", "line 1"]),
    (
        "unknown top key",
        'nmae = "x"\n[agent]\ncommand = ["python3"]\n',
        ["'nmae'", "line 1", "unknown key"],
    ),
    (
        "unknown component key",
        '[agent]\ncommand = ["python3"]\ncomand = ["x"]\n',
        ["'comand'", "line 3", "[agent]"],
    ),
    ("no agent, no proxy", 'name = "empty"\n', ["no [agent]"]),
    (
        "plugin and command",
        '[[proxy]]\nplugin = "proxies.arrow:ArrowProxy"\ncommand = ["python3"]\n[agent]\ncommand = ["python3"]\n',
        ["both 'plugin' and 'command'", "line 2"],
    ),
    (
        "missing executable",
        '[agent]\ncommand = ["surely-not-an-executable-xyz"]\n',
        ["'surely-not-an-executable-xyz' not found", "line 2", "'command'"],
    ),
    (
        "relative executable missing",
        '[agent]\ncommand = ["./bin/agent"]\n',
        ["executable not found", "bin/agent"],
    ),
    (
        "command not a list",
        '[agent]\ncommand = "python3 -m x"\n',
        ["non-empty list of strings", "never run through a shell"],
    ),
    (
        "bad dialect",
        '[[proxy]]\ncommand = ["python3"]\ndialect = "weird"\n',
        ["'dialect'", "line 3"],
    ),
    (
        "env not strings",
        '[agent]\ncommand = ["python3"]\nenv = { A = 1 }\n',
        ["'env'", "table of strings"],
    ),
    ("cwd missing", '[agent]\ncommand = ["python3"]\ncwd = "nope"\n', ["'cwd'", "is not a folder"]),
    ("proxy not array", '[proxy]\ncommand = ["python3"]\n', ["[[proxy]]"]),
    (
        "url and command",
        '[agent]\ncommand = ["python3"]\nurl = "ws://h:1/acp"\n',
        ["both 'command' and 'url'", "'url'", "line 3"],
    ),
    (
        "url and plugin",
        '[[proxy]]\nurl = "ws://h:1/acp"\nplugin = "proxies.arrow:ArrowProxy"\n',
        ["both 'plugin' and 'url'", "line 3"],
    ),
    (
        "url scheme",
        '[agent]\nurl = "http://h:1/acp"\n',
        ["ws:// or wss://", "'url'", "line 2"],
    ),
    ("url without host", '[agent]\nurl = "ws:///acp"\n', ["no host", "'url'"]),
    ("url bad port", '[agent]\nurl = "ws://h:99999/acp"\n', ["bad url", "'url'"]),
    (
        "url unset variable",
        '[agent]\nurl = "ws://${ACP_TEST_SURELY_UNSET_HOST}:1/acp"\n',
        ["ACP_TEST_SURELY_UNSET_HOST is not set", "'url'", "line 2"],
    ),
    (
        "header unset variable",
        '[agent]\nurl = "ws://h:1/acp"\nheaders = { Authorization = "Bearer ${ACP_TEST_SURELY_UNSET}" }\n',
        ["ACP_TEST_SURELY_UNSET is not set", "'headers'", "line 3"],
    ),
    (
        "headers not strings",
        '[agent]\nurl = "ws://h:1/acp"\nheaders = { X-Count = 1 }\n',
        ["'headers' must be a table of strings"],
    ),
    (
        "handshake header",
        '[agent]\nurl = "ws://h:1/acp"\nheaders = { Sec-WebSocket-Key = "x" }\n',
        ["set by the WebSocket handshake"],
    ),
    (
        "env with url",
        '[agent]\nurl = "ws://h:1/acp"\nenv = { A = "b" }\n',
        ["'env' applies to a command or plugin, not a url"],
    ),
    (
        "headers with command",
        '[agent]\ncommand = ["python3"]\nheaders = { A = "b" }\n',
        ["'headers' applies to a remote component (url)"],
    ),
    (
        "second proxy bad",
        '[[proxy]]\ncommand = ["python3"]\n[[proxy]]\ncommand = ["python3"]\nname = 5\n[agent]\ncommand = ["python3"]\n',
        ["[[proxy]] #2", "line 5"],
    ),
]


@pytest.mark.parametrize(("label", "text", "expected"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
@pytest.mark.parametrize("command", ["check", "run"])
def test_bad_chain_files(
    tmp_path: Path, label: str, text: str, expected: list[str], command: str
) -> None:
    chain = tmp_path / "bad.toml"
    chain.write_text(text)
    done = _conductor(
        command,
        str(chain),
        stdin=b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n',
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert done.stdout == b""
    assert "Traceback" not in err
    assert str(chain) in err
    for fragment in expected:
        assert fragment in err, (fragment, err)
    assert err.count("\n") == 1, "one paragraph"


def test_missing_file(tmp_path: Path) -> None:
    done = _conductor("check", str(tmp_path / "nope.toml"))
    assert done.returncode == 2 and b"no such file" in done.stderr


def test_check_prints_the_resolved_chain(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    script = tmp_path / "tools" / "agent.py"
    script.write_text("")
    chain = tmp_path / "ok.toml"
    chain.write_text(
        'name = "mine"\n[[proxy]]\ncommand = ["python3", "tools/agent.py"]\ndialect = "plain"\n'
        '[agent]\ncommand = ["python", "-m", "conductor.demo_agent"]\nenv = { A = "b" }\n'
    )
    done = _conductor("check", str(chain))
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "chain 'mine'" in out
    assert f"proxy 'agent': {sys.executable} {script}" in out
    assert "dialect=plain" in out
    assert f"agent 'demo_agent': {sys.executable} -m conductor.demo_agent" in out
    assert "env=A" in out


def test_names_are_derived_and_made_unique(tmp_path: Path) -> None:
    chain = tmp_path / "c.toml"
    chain.write_text(
        '[[proxy]]\ncommand = ["python3", "-m", "proxies.arrow"]\n'
        '[[proxy]]\ncommand = ["python3", "-m", "proxies.arrow"]\n'
        '[agent]\ncommand = ["python3", "-m", "conductor.demo_agent"]\n'
    )
    loaded = load_chain(chain)
    assert [c.name for c in loaded.components] == ["arrow", "arrow-2", "demo_agent"]
    assert not loaded.proxy_mode


def test_chain_without_agent_is_proxy_mode(tmp_path: Path) -> None:
    chain = tmp_path / "c.toml"
    chain.write_text('[[proxy]]\ncommand = ["python3", "-m", "proxies.arrow"]\n')
    loaded = load_chain(chain)
    assert loaded.proxy_mode and loaded.agent is None
    assert "runs as a proxy" in loaded.describe()


def test_version_and_help() -> None:
    done = _conductor("--version")
    assert done.returncode == 0 and b"conductor, version" in done.stdout
    for command in ["run", "check", "prompt", "serve"]:
        done = _conductor(command, "--help")
        assert done.returncode == 0 and b"Usage" in done.stdout, command


def test_remote_components_expand_variables_and_check_hides_secrets(tmp_path: Path) -> None:
    chain = tmp_path / "remote.toml"
    chain.write_text(
        '[[proxy]]\nurl = "wss://${ACP_TEST_HOST}:9443/acp?access_token=${ACP_TEST_SECRET}"\n'
        'dialect = "plain"\n'
        '[agent]\nname = "box"\nurl = "ws://${ACP_TEST_HOST}:9000"\n'
        'headers = { Authorization = "Bearer ${ACP_TEST_SECRET}", X-Team = "a" }\n'
    )
    env = {"ACP_TEST_HOST": "build-box", "ACP_TEST_SECRET": "hunter2-secret"}
    done = _conductor("check", str(chain), env=env)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "proxy 'remote': wss://build-box:9443/acp?access_token=***" in out
    assert "dialect=plain" in out
    # A bare host:port means the ACP endpoint, /acp.
    assert "agent 'box': ws://build-box:9000/acp" in out
    assert "headers=Authorization,X-Team" in out
    assert "hunter2" not in out + done.stderr.decode()
    os.environ.update(env)
    try:
        loaded = load_chain(chain)
    finally:
        for key in env:
            del os.environ[key]
    agent = loaded.agent
    assert agent is not None and agent.url == "ws://build-box:9000/acp"
    assert agent.headers == {"Authorization": "Bearer hunter2-secret", "X-Team": "a"}
    assert "hunter2" not in repr(agent)
