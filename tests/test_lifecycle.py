"""Failure behaviour and process lifecycle (spec section 5)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from conftest import (
    allow_permission,
    demo_agent_block,
    descendants,
    prompt_params,
    proxy_block,
    script_agent_block,
    start_session,
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_dying_agent_fails_pending_requests_with_its_cause(make_chain, conductor):
    chain = make_chain(proxy_block() + demo_agent_block(name="fragile"))
    peer = conductor(chain)
    session = start_session(peer)
    started = time.monotonic()
    peer.request(5, "session/prompt", prompt_params(session, "crash"))
    _, response = peer.response(5, timeout=5)
    assert time.monotonic() - started < 1.5
    error = response["error"]
    assert "fragile" in error["message"] and "status 3" in error["message"]
    assert error["data"]["component"] == "fragile"
    assert error["data"]["exitStatus"] == 3
    assert any("crash" in line for line in error["data"]["stderrTail"])
    assert peer.wait(timeout=10) != 0


def test_dying_proxy_fails_the_request_routed_through_it(make_chain, conductor):
    chain = make_chain(proxy_block("--exit-after", "5", name="flaky") + demo_agent_block())
    peer = conductor(chain)
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "hello"))
    _, response = peer.response(5, timeout=5)
    error = response["error"]
    assert error["data"]["component"] == "flaky" and error["data"]["exitStatus"] == 4
    assert "dying" in "\n".join(error["data"]["stderrTail"])
    assert peer.wait(timeout=10) == 1


@pytest.mark.parametrize("setsid", [False, True])
def test_stdin_eof_leaves_no_process_behind(make_chain, conductor, tmp_path, setsid):
    pidfile = tmp_path / "grandchild.pid"
    extra = ("--setsid-grandchild",) if setsid else ()
    chain = make_chain(proxy_block() + script_agent_block("--grandchild", str(pidfile), *extra))
    peer = conductor(chain)
    start_session(peer)
    tree = descendants(peer.proc.pid)
    grandchild = int(pidfile.read_text())
    assert grandchild in tree and len(tree) >= 3
    peer.close_stdin()
    assert peer.wait(timeout=15) == 0
    for pid in tree:
        assert _wait_gone(pid), f"pid {pid} survived the conductor"


def test_sigterm_stops_a_stubborn_agent(make_chain, conductor):
    chain = make_chain(script_agent_block("--stubborn"))
    peer = conductor(chain, env={})
    start_session(peer)
    tree = descendants(peer.proc.pid)
    started = time.monotonic()
    peer.proc.send_signal(signal.SIGTERM)
    assert peer.wait(timeout=15) == 0
    assert time.monotonic() - started < 8
    for pid in tree:
        assert _wait_gone(pid)


def test_slow_editor_bounds_conductor_memory(make_chain, conductor):
    """The editor stops reading while the agent floods: the conductor must not buffer it all."""
    chain = make_chain(script_agent_block("--flood", "150000"))  # ~150 MB of updates
    peer = conductor(chain)
    session = start_session(peer)
    # Stop draining stdout: pause the pump by not reading; the pipe fills up.
    peer.request(3, "session/prompt", prompt_params(session, "flood"))
    time.sleep(3)
    conductor_pid = peer.proc.pid
    with open(f"/proc/{conductor_pid}/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    # Our reader thread keeps pulling lines into a queue, so measure the conductor only.
    assert rss_kb < 200_000, f"conductor RSS {rss_kb} kB"
    _, response = peer.response(3, timeout=120)
    assert response["result"]["stopReason"] == "end_turn"


def test_nested_conductor_behaves_like_the_flattened_chain(make_chain, conductor):
    inner = make_chain(proxy_block("--tag", "[b]"), name="inner.toml")
    nested_proxy = (
        f'[[proxy]]\nname = "nested"\ncommand = ["python3", "-m", "conductor", "run", "{inner}"]\n'
    )
    nested = make_chain(proxy_block("--tag", "[a]") + nested_proxy + demo_agent_block())
    flat = make_chain(
        proxy_block("--tag", "[a]") + proxy_block("--tag", "[b]") + demo_agent_block()
    )

    def transcript(chain: Path) -> list:
        peer = conductor(chain)
        session = start_session(peer)
        peer.request(5, "session/prompt", prompt_params(session, "please ask permission"))
        before, request = allow_permission(peer)
        updates, response = peer.response(5)
        peer.request(6, "_demo/echo", {"x": [1, 2]})
        _, echo = peer.response(6)
        peer.close_stdin()
        assert peer.wait() == 0
        request.pop("id")
        return [*before, request, *updates, response, echo]

    assert transcript(nested) == transcript(flat)


def test_proxy_mode_expects_proxy_initialize(make_chain, conductor):
    chain = make_chain(proxy_block())
    peer = conductor(chain)
    peer.request(1, "initialize", {"protocolVersion": 1})
    _, response = peer.response(1)
    assert response["error"]["code"] == -32600 and "_proxy/initialize" in response["error"]["data"]


def test_proxy_mode_wraps_and_unwraps_byte_for_byte(make_chain, conductor, tmp_path):
    """A chain without agent forwards its last proxy's messages to its own successor (us)."""
    sent = tmp_path / "proxy-out.jsonl"
    chain = make_chain(proxy_block("--spaced", "--log-out", str(sent)), name="solo.toml")
    peer = conductor(chain)
    peer.send_raw(
        b'{"jsonrpc":"2.0","id":1,"method":"proxy/initialize","params":{"protocolVersion":1,"n":"\xc3\xa9"}}'
    )
    raw = peer.read_raw()
    envelope = json.loads(raw)
    assert envelope["method"] == "proxy/successor", "answered in the dialect our conductor used"
    assert envelope["params"]["method"] == "initialize"
    deadline = time.monotonic() + 10  # the proxy logs what it sent just after sending it
    while not sent.exists() or not sent.read_bytes().strip():
        assert time.monotonic() < deadline, "the proxy never logged its output"
        time.sleep(0.01)
    proxy_line = sent.read_bytes().splitlines()[0]
    inner = json.dumps(json.loads(proxy_line)["params"]["params"]).encode()
    assert b"\\u00e9" in inner and inner in proxy_line and inner in raw
    # Our successor answers; the proxy's response reaches us with our id.
    peer.send({"jsonrpc": "2.0", "id": envelope["id"], "result": {"protocolVersion": 1}})
    _, response = peer.response(1)
    assert response["result"] == {"protocolVersion": 1}
    # A request from our successor travels up through the proxy, unwrapped, hop-local _meta dropped.
    peer.send_raw(
        b'{"jsonrpc":"2.0","id":"up","method":"proxy/successor","params":'
        b'{"method":"session/request_permission","params":{"sessionId":"s","x":2.5},"_meta":{"hop":"local"}}}'
    )
    up = peer.read()
    assert up["method"] == "session/request_permission" and up["params"] == {
        "sessionId": "s",
        "x": 2.5,
    }
    assert "hop" not in json.dumps(up)
    peer.send({"jsonrpc": "2.0", "id": up["id"], "result": {"ok": True}})
    _, answer = peer.response("up")
    assert answer["result"] == {"ok": True}


def test_a_component_that_cannot_start_fails_initialize_and_the_run(
    make_chain, conductor, tmp_path
):
    script = tmp_path / "agent.sh"
    script.write_text("#!/no/such/interpreter\n")  # executable, so it passes the check...
    script.chmod(0o755)
    chain = make_chain(proxy_block() + f'[agent]\nname = "broken"\ncommand = ["{script}"]\n')
    peer = conductor(chain)
    peer.request(1, "initialize", {"protocolVersion": 1})
    _, response = peer.response(1)
    # ...but its start fails: the editor hears why, and the run ends (nothing half-started).
    assert response["error"]["code"] == -32603 and "broken" in response["error"]["data"]
    assert peer.wait(timeout=15) == 1
