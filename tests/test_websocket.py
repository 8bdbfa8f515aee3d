"""`conductor serve` and remote components: ACP over WebSocket on real loopback sockets.

The client side is the `websockets` package (nobody here wrote it); the server
side is the real `conductor serve` in a subprocess. Process checks read /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from conftest import (
    PY,
    ROOT,
    TLS_CERT,
    TLS_KEY,
    TOKEN,
    Peer,
    WsPeer,
    agent_text,
    alive,
    allow_permission,
    demo_agent_block,
    descendants,
    prompt_params,
    proxy_block,
    refusal,
    script_agent_block,
    start_session,
    wait_until,
)


def demo_chain(make_chain: Any, *proxy_args: str) -> Path:
    return make_chain(proxy_block(*proxy_args) + demo_agent_block())


def http_status(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


# ---------------------------------------------------------------- serving


def test_a_served_chain_speaks_acp_over_websocket(make_chain, serve):
    served = serve(demo_chain(make_chain))
    assert served.url.startswith("ws://127.0.0.1:") and served.url.endswith("/acp")
    peer = served.connect()
    uuid.UUID(peer.connection_id)  # the 101 carries Acp-Connection-Id
    session = peer.start_session()
    updates, response = peer.prompt(2, session, "hello")
    assert response["result"]["stopReason"] == "end_turn"
    assert "hello" in agent_text(updates)
    peer.close()
    served.wait_for_log("closed")
    assert served.terminate() == 0
    assert served.stdout == b"", "serve writes nothing to stdout"
    lines = [line for line in served.stderr_lines if "connection" in line]
    assert any("opened from 127.0.0.1" in line for line in lines)
    assert any("closed after" in line for line in lines)


def test_frames_batches_binary_and_pretty_printed_json(make_chain, serve):
    served = serve(demo_chain(make_chain))
    peer = served.connect()
    peer.start_session()
    peer.ws.send(b'{"jsonrpc":"2.0","id":"bin","method":"_demo/echo"}')  # binary: ignored
    # A pretty-printed frame crosses a newline-delimited pipe (the proxy) intact.
    pretty = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "_demo/echo", "params": {"a": [1, 2], "b": "x\ny"}},
        indent=2,
    )
    peer.ws.send(pretty)
    _, echo = peer.response(7)
    assert echo["result"] == {"params": {"a": [1, 2], "b": "x\ny"}}
    batch = [
        {"jsonrpc": "2.0", "id": 8, "method": "_demo/echo", "params": {"n": 8}},
        {"jsonrpc": "2.0", "id": 9, "method": "_demo/echo", "params": {"n": 9}},
    ]
    peer.ws.send(json.dumps(batch))
    answer = peer.read()
    assert isinstance(answer, list) and sorted(m["id"] for m in answer) == [8, 9]
    peer.ws.send("{not json")
    assert peer.read()["error"]["code"] == -32700
    peer.request(10, "_demo/echo", {"still": "usable"})
    _, last = peer.response(10)
    assert "result" in last, "the binary frame got no answer and broke nothing"


def test_bursts_and_big_messages_keep_their_order_and_bytes(make_chain, serve):
    """Thousands of updates in one burst (sent in batches of frames), and messages of many
    megabytes both ways."""
    served = serve(make_chain(proxy_block() + script_agent_block("--flood", "3000")))
    peer = served.connect()
    session = peer.start_session()
    updates, response = peer.prompt(2, session, "flood")
    assert response["result"]["stopReason"] == "end_turn"
    texts = [m["params"]["update"]["content"]["text"][:8] for m in updates]
    assert texts == [f"{i:08d}" for i in range(3000)]
    big = "é" * (3 << 20)  # 6 MB of UTF-8 in one frame, to the agent and back
    peer.request(3, "_test/echo", {"big": big})
    _, echo = peer.response(3)
    assert echo["result"] == {"params": {"big": big}}
    peer.request(4, "_test/big", {"size": 8 << 20})
    _, answer = peer.response(4)
    assert answer["result"]["text"] == "y" * (8 << 20)


def test_concurrent_connections_each_run_their_own_chain(make_chain, serve):
    served = serve(demo_chain(make_chain))
    peers = [served.connect() for _ in range(3)]
    trees = []
    for peer in peers:
        before = descendants(served.pid)
        assert peer.start_session() == "sess-1", "a fresh agent for every connection"
        trees.append(descendants(served.pid) - before)
    assert all(len(tree) >= 2 for tree in trees), "a proxy and an agent per connection"
    assert len({peer.connection_id for peer in peers}) == 3
    # Interleaved prompts, each answered on its own connection.
    for i, peer in enumerate(peers):
        peer.request(2, "session/prompt", prompt_params("sess-1", f"connection {i}"))
    for i, peer in enumerate(peers):
        updates, response = peer.response(2)
        assert response["result"]["stopReason"] == "end_turn"
        assert f"connection {i}" in agent_text(updates)
    # Closing one connection stops its chain only.
    peers[0].close()
    wait_until(lambda: not any(alive(pid) for pid in trees[0]), what="chain 0 stopped")
    assert all(alive(pid) for tree in trees[1:] for pid in tree)
    peers[1].request(3, "session/prompt", prompt_params("sess-1", "still here"))
    _, response = peers[1].response(3)
    assert response["result"]["stopReason"] == "end_turn"


def test_a_vanished_client_leaves_no_process_and_spares_other_connections(
    make_chain, serve, tmp_path
):
    """SIGKILL the client mid-prompt (no close frame): its chain goes, grandchildren included,
    even one in its own session that only the subreaper can find; the other connection's
    processes are untouched."""
    pidfile = tmp_path / "grandchild.pid"
    chain = make_chain(
        proxy_block() + script_agent_block("--grandchild", str(pidfile), "--setsid-grandchild")
    )
    demo = make_chain(proxy_block() + demo_agent_block(), name="demo.toml")
    served = serve(chain)
    other = served.connect()
    other.start_session()
    survivors = descendants(served.pid)
    assert int(pidfile.read_text()) in survivors

    served_demo = serve(demo)
    client = subprocess.Popen(
        [PY, str(ROOT / "tests" / "peers" / "ws_vanishing_client.py"), served_demo.url, TOKEN],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert client.stdout is not None
        assert client.stdout.readline() == b"waiting\n"  # the prompt is mid-permission
        doomed = descendants(served_demo.pid)
        assert len(doomed) >= 2
        client.kill()
        client.wait()
    finally:
        client.kill()
    wait_until(lambda: not descendants(served_demo.pid), what="the vanished client's chain gone")
    assert all(not alive(pid) for pid in doomed)
    served_demo.wait_for_log("closed after")

    # Same server, two connections: a dropped one takes only its own (setsid) grandchild.
    second = served.connect()
    second.start_session()
    mine = descendants(served.pid) - survivors
    grandchild = int(pidfile.read_text())
    assert grandchild in mine and len(mine) >= 3
    second.ws.socket.close()  # vanish without a close frame
    wait_until(lambda: not any(alive(pid) for pid in mine), what="the dropped chain gone")
    assert all(alive(pid) for pid in survivors)
    _, response = other.prompt(5, "s-1", "still served")
    assert response["result"]["stopReason"] == "end_turn"


def test_sigterm_closes_every_connection_with_a_close_frame(make_chain, serve):
    served = serve(demo_chain(make_chain))
    peers = [served.connect() for _ in range(2)]
    for peer in peers:
        peer.start_session()
    tree = descendants(served.pid)
    assert len(tree) >= 4
    served.proc.send_signal(signal.SIGTERM)
    for peer in peers:
        code, reason = peer.closed_with()
        assert code == 1001 and "shutting down" in reason
    assert served.proc.wait(timeout=20) == 0
    assert all(not alive(pid) for pid in tree)


# ----------------------------------------------------------------- security


def test_refusals_happen_before_the_upgrade_and_start_nothing(make_chain, serve):
    served = serve(demo_chain(make_chain), "--allow-origin", "https://editor.example")
    base = served.url
    status, body = refusal(base)
    assert status == 401 and "bearer token" in body
    status, _ = refusal(base, additional_headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, body = refusal(
        base, additional_headers={"Authorization": f"Bearer {TOKEN}"}, origin="https://evil.example"
    )
    assert status == 403 and "evil.example" in body
    status, body = refusal(
        base.replace("/acp", "/other"), additional_headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 404 and "/acp" in body
    http = base.replace("ws://", "http://")
    assert http_status(http, headers={"Authorization": f"Bearer {TOKEN}"}) == 426
    assert http_status(http, "POST") == 405
    assert not descendants(served.pid), "nothing started for a refused request"
    # The same server accepts the token in the query and an allowed Origin.
    WsPeer(f"{base}?access_token={TOKEN}").start_session()
    WsPeer(
        base, headers={"Authorization": f"Bearer {TOKEN}"}, origin="https://editor.example"
    ).start_session()


def test_no_token_on_a_public_address_is_refused(make_chain):
    chain = demo_chain(make_chain)
    env = {k: v for k, v in os.environ.items() if k != "ACP_CONDUCTOR_TOKEN"}
    done = subprocess.run(
        [PY, "-m", "conductor", "serve", str(chain), "--listen", "0.0.0.0:0"],
        capture_output=True,
        env=env,
        timeout=30,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert b"token" in done.stderr and b"Traceback" not in done.stderr


def test_loopback_without_a_token_generates_one(make_chain, serve):
    served = serve(demo_chain(make_chain), token=None)
    line = next(line for line in served.stderr_lines if line.startswith("token: "))
    token = line.split()[1]
    assert len(token) >= 24
    assert refusal(served.url)[0] == 401
    served.connect(token=token).start_session()


def test_port_in_use_is_a_clear_error(make_chain, serve):
    served = serve(demo_chain(make_chain))
    done = subprocess.run(
        [
            PY,
            "-m",
            "conductor",
            "serve",
            str(demo_chain(make_chain)),
            "--listen",
            f"127.0.0.1:{served.port}",
            "--token",
            "x",
        ],
        capture_output=True,
        timeout=30,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert b"cannot listen" in done.stderr and b"Traceback" not in done.stderr


def test_tls(make_chain, serve):
    served = serve(demo_chain(make_chain), "--tls-cert", str(TLS_CERT), "--tls-key", str(TLS_KEY))
    assert served.url.startswith("wss://")
    import ssl

    context = ssl.create_default_context(cafile=str(TLS_CERT))
    peer = served.connect(ssl=context)
    assert peer.start_session() == "sess-1"
    # prompt --connect trusts a private CA through SSL_CERT_FILE, as the standard library does.
    trusted = subprocess.run(
        [PY, "-m", "conductor", "prompt", "--connect", served.url, "--token", TOKEN, "over tls"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "SSL_CERT_FILE": str(TLS_CERT)},
    )
    assert trusted.returncode == 0, trusted.stderr
    assert b"over tls" in trusted.stdout
    # Without trusting the certificate, the client refuses the server.
    done = subprocess.run(
        [PY, "-m", "conductor", "prompt", "--connect", served.url, "--token", TOKEN, "hi"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "SSL_CERT_FILE": "/nonexistent"},
    )
    assert done.returncode == 1 and b"TLS" in done.stderr and b"Traceback" not in done.stderr


# -------------------------------------------------------------------- limits


def test_frame_size_limit_closes_with_a_reason(make_chain, serve):
    served = serve(demo_chain(make_chain), "--max-frame-size", "4K")
    peer = served.connect()
    peer.start_session()
    tree = descendants(served.pid)
    peer.request(2, "_demo/echo", {"blob": "x" * 8000})
    code, reason = peer.closed_with()
    assert code == 1009 and "4096" in reason
    wait_until(lambda: not any(alive(pid) for pid in tree), what="its chain stopped")


def test_connection_limit_closes_with_a_reason(make_chain, serve):
    served = serve(demo_chain(make_chain), "--max-connections", "1")
    first = served.connect()
    first.start_session()
    second = served.connect()
    code, reason = second.closed_with()
    assert code == 1013 and "--max-connections" in reason
    _, response = first.prompt(2, "sess-1", "unaffected")
    assert response["result"]["stopReason"] == "end_turn"
    first.close()
    served.wait_for_log("closed after")
    served.connect().start_session()  # room again


def test_idle_timeout_closes_with_a_reason(make_chain, serve):
    served = serve(demo_chain(make_chain), "--idle-timeout", "0.5")
    peer = served.connect()
    peer.start_session()
    tree = descendants(served.pid)
    # A request waiting for its answer is not idleness, however long it is silent.
    peer.request(2, "session/prompt", prompt_params("sess-1", "please ask permission"))
    _, ask = peer.read_until(lambda m: m.get("method") == "session/request_permission")
    time.sleep(1.5)  # three idle periods with nothing on the wire
    peer.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "cancelled"}}})
    _, response = peer.response(2)
    assert "result" in response
    # Then nothing in flight: closed.
    code, reason = peer.closed_with()
    assert code == 1001 and "idle" in reason
    wait_until(lambda: not any(alive(pid) for pid in tree), what="its chain stopped")


# --------------------------------------------------------- remote components


def remote_chain(
    make_chain: Any, url: str, *, proxies: str = "", name: str = "remote.toml"
) -> Path:
    block = (
        f'[agent]\nname = "far"\nurl = "{url}"\n'
        'headers = { Authorization = "Bearer ${ACP_TEST_TOKEN}" }\n'
    )
    return make_chain(proxies + block, name=name)


def transcript(peer: Peer) -> list[Any]:
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "please ask permission"))
    before, request = allow_permission(peer)
    updates, response = peer.response(5)
    peer.request(6, "_demo/echo", {"x": [1, 2.5, "é"]})
    _, echo = peer.response(6)
    peer.close_stdin()
    assert peer.wait() == 0, peer.stderr
    request.pop("id")
    return [*before, request, *updates, response, echo]


def test_a_remote_agent_gives_the_same_transcript_as_a_local_one(make_chain, serve, conductor):
    """editor -> conductor -> WebSocket -> conductor -> agent == editor -> conductor -> agent."""
    far = serve(make_chain(demo_agent_block(), name="far.toml"))
    remote = remote_chain(make_chain, far.url, proxies=proxy_block("--tag", "[a]"))
    local = make_chain(proxy_block("--tag", "[a]") + demo_agent_block(name="far"))
    env = {"ACP_TEST_TOKEN": TOKEN}
    assert transcript(conductor(remote, env=env)) == transcript(conductor(local))
    far.wait_for_log("closed after")
    assert not descendants(far.pid), "the remote chain stopped with the connection"


def test_a_remote_proxy_is_a_served_chain_without_agent(make_chain, serve, conductor):
    """A proxy kept elsewhere: `serve` a chain that has no [agent] (it runs as a proxy), and
    name it with `url =` in a [[proxy]]; the transcript equals that of the local proxy."""
    far = serve(make_chain(proxy_block("--tag", "[far]"), name="far-proxy.toml"))
    remote = make_chain(
        f'[[proxy]]\nname = "far"\nurl = "{far.url}"\n'
        'headers = { Authorization = "Bearer ${ACP_TEST_TOKEN}" }\n' + demo_agent_block(),
        name="remote-proxy.toml",
    )
    local = make_chain(proxy_block("--tag", "[far]") + demo_agent_block(), name="local.toml")
    remote_run = conductor(remote, env={"ACP_TEST_TOKEN": TOKEN})
    assert transcript(remote_run) == transcript(conductor(local))
    far.wait_for_log("closed after")
    assert not descendants(far.pid)


def test_an_unreachable_remote_agent_fails_initialize_by_name_and_url(make_chain, conductor):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/acp"
    peer = conductor(
        remote_chain(make_chain, url, proxies=proxy_block()), env={"ACP_TEST_TOKEN": "x"}
    )
    peer.request(1, "initialize", {"protocolVersion": 1})
    _, response = peer.response(1)
    error = response["error"]
    assert "far" in error["message"] and url in error["message"]
    assert error["data"]["component"] == "far" and error["data"]["url"] == url
    assert peer.wait(timeout=15) == 1


def test_a_refused_remote_agent_names_the_status(make_chain, serve, conductor):
    far = serve(make_chain(demo_agent_block(), name="far.toml"))
    secret = "not-the-token-5e1f"
    peer = conductor(remote_chain(make_chain, far.url), env={"ACP_TEST_TOKEN": secret})
    peer.request(1, "initialize", {"protocolVersion": 1})
    _, response = peer.response(1)
    assert "401" in response["error"]["message"] and far.url in response["error"]["message"]
    assert secret not in json.dumps(response) + peer.stderr, "never echo the secret"
    assert peer.wait(timeout=15) == 1


def test_a_dropped_remote_fails_pending_requests_like_a_dying_process(make_chain, serve, conductor):
    far = serve(make_chain(demo_agent_block(), name="far.toml"))
    peer = conductor(
        remote_chain(make_chain, far.url, proxies=proxy_block()), env={"ACP_TEST_TOKEN": TOKEN}
    )
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "please ask permission"))
    peer.read_until(lambda m: m.get("method") == "session/request_permission")
    far.kill()  # the remote end vanishes; the prompt is pending on it
    _, response = peer.response(5)
    error = response["error"]
    assert error["data"]["component"] == "far" and error["data"]["url"] == far.url
    assert error["data"]["closeCode"] == 1006
    assert "closed the connection" in error["message"]
    assert peer.wait(timeout=15) == 1


def test_prompt_connect_talks_to_a_served_chain(make_chain, serve):
    served = serve(demo_chain(make_chain))
    command = [PY, "-m", "conductor", "prompt", "--connect", served.url]
    ok = subprocess.run(
        [*command, "hello over the wire"],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "ACP_CONDUCTOR_TOKEN": TOKEN},
    )
    assert ok.returncode == 0, ok.stderr
    assert b"hello over the wire" in ok.stdout and b"end_turn" in ok.stderr
    refused = subprocess.run(
        [*command, "--token", "wrong", "hello"], capture_output=True, timeout=60, cwd=ROOT
    )
    assert refused.returncode == 1
    assert b"401" in refused.stderr and b"Traceback" not in refused.stderr
