"""Flow control under load (spec section 5): pipelined floods, slow peers, noisy stderr.

Every test drives real processes over real pipes. The editor writes from one thread while
another reads, as a real editor does, so a conductor that stops reading while it waits for
room somewhere else deadlocks here instead of in the field. Verdicts are counts, order and
peak memory; the only clock is STALL, which bounds a hang (no message at all for that long).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from typing import Any

import pytest
from conftest import (
    PY,
    ROOT,
    SCRIPT_AGENT,
    Peer,
    alive,
    descendants,
    plugin_block,
    prompt_params,
    proxy_block,
    script_agent_block,
    start_session,
    wait_until,
)

STALL = 30.0  # seconds without a single message from the conductor: it hangs
TEXT_BYTES = 8000  # prompt text per request: a pasted file, not a one-liner
FLOOD_EDITOR = ROOT / "tests" / "peers" / "flood_editor.py"
MiB = 1 << 20
SLOW_AGENT = ("--delay-ms", "3", "--echo")  # correct but slow: 3 ms a line, replies in kind


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a live process has used (shown in messages, never judged)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int:
    """The peak resident set of a live process, in bytes (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kb * 1024


class Flood:
    """Pipelined prompts written from a thread, so the test reads while the pipe is full."""

    def __init__(self, peer: Peer, session: str, count: int, first_id: int = 100) -> None:
        self.ids = list(range(first_id, first_id + count))
        text = "x" * TEXT_BYTES
        self.data = b"".join(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "session/prompt",
                    "params": prompt_params(session, text),
                }
            ).encode()
            + b"\n"
            for i in self.ids
        )
        assert peer.proc.stdin is not None
        self.fd = peer.proc.stdin.fileno()
        self.written = 0
        threading.Thread(target=self._write, daemon=True).start()

    def _write(self) -> None:
        view = memoryview(self.data)
        with contextlib.suppress(OSError):  # the peer is killed at teardown if it hung
            while self.written < len(view):
                self.written += os.write(self.fd, view[self.written : self.written + MiB])


def answers(peer: Peer, flood: Flood) -> tuple[list[Any], list[dict[str, Any]]]:
    """Read until every flooded request is answered; return (answer ids in arrival order,
    the notifications that came meanwhile). A silence of STALL seconds is a hang."""
    got: list[Any] = []
    notes: list[dict[str, Any]] = []
    expected = set(flood.ids)
    while expected:
        try:
            message = peer.read(timeout=STALL)
        except AssertionError:
            raise AssertionError(
                f"{len(got)} of {len(flood.ids)} prompts answered, then nothing for {STALL}s "
                f"({flood.written} of {len(flood.data)} request bytes written); "
                f"stderr: {peer.stderr[-2000:]}"
            ) from None
        if "method" in message:
            notes.append(message)
            continue
        assert message.get("result") == {"stopReason": "end_turn"}, message
        got.append(message["id"])
        expected.discard(message["id"])
    return got, notes


def test_harness_floods_reach_a_bare_agent(tmp_path):
    """Control: the flood and the reader work without a conductor (the agent itself is fine)."""
    peer = Peer([PY, str(SCRIPT_AGENT), *SLOW_AGENT], cwd=ROOT)
    try:
        session = start_session(peer)
        flood = Flood(peer, session, 1500)
        got, notes = answers(peer, flood)
        assert got == flood.ids and len(notes) == len(flood.ids)
    finally:
        peer.kill()


def test_pipelined_prompts_through_a_proxy_are_all_answered_in_order(make_chain, conductor):
    """3000 pipelined 8 KB prompts through a subprocess proxy that is briefly busy: far more
    bytes in flight than pipes and the conductor's high-water mark hold. Every answer must
    arrive, in request order, with the conductor's memory bounded."""
    chain = make_chain(proxy_block("--pause-ms", "300") + script_agent_block())
    peer = conductor(chain)
    session = start_session(peer)
    flood = Flood(peer, session, 3000)
    got, _ = answers(peer, flood)
    assert got == flood.ids, "answers out of request order"
    peak = peak_rss(peer.proc.pid)
    assert peak < 300 * MiB, f"conductor peak RSS {peak / MiB:.0f} MiB"


def test_pipelined_prompts_to_a_slow_agent_are_all_answered_in_order(make_chain, conductor):
    """A correct but slow agent (3 ms per line, replying with the prompt's text): the editor
    pipelines 1500 8 KB prompts. Every reply and answer must arrive, in order."""
    chain = make_chain(script_agent_block(*SLOW_AGENT))
    peer = conductor(chain)
    session = start_session(peer)
    flood = Flood(peer, session, 1500)
    got, notes = answers(peer, flood)
    assert got == flood.ids, "answers out of request order"
    assert len(notes) == len(flood.ids), "a reply (session/update) went missing"
    peak = peak_rss(peer.proc.pid)
    assert peak < 300 * MiB, f"conductor peak RSS {peak / MiB:.0f} MiB"


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


KILL_FLOOD = 1500  # prompts the killed editor floods: it dies before they are all answered


def test_editor_killed_mid_flood_takes_the_chain_down(make_chain, tmp_path):
    """The editor is SIGKILLed while its flood is in flight: the conductor (grace 1 s) must
    notice it is gone and exit, leaving no child behind."""
    chain = make_chain(proxy_block() + script_agent_block(*SLOW_AGENT))
    pidfile, log = tmp_path / "conductor.pid", tmp_path / "conductor.stderr"
    editor = subprocess.Popen(
        [
            PY,
            str(FLOOD_EDITOR),
            str(chain),
            str(pidfile),
            str(KILL_FLOOD),
            str(TEXT_BYTES),
            str(log),
        ],
        cwd=ROOT,
    )
    tree: dict[int, bytes] = {}
    try:
        wait_until(pidfile.exists, timeout=60, what="the editor's flood to get going")
        pid = int(pidfile.read_text())
        tree = {p: _cmdline(p) for p in {pid, *descendants(pid)}}
        assert len(tree) >= 3, f"expected conductor, proxy and agent, found {tree}"
        editor.kill()
        editor.wait()
        try:
            wait_until(
                lambda: not any(alive(p) for p in tree),
                timeout=STALL,
                what="the conductor and its children to exit after the editor died",
            )
        except AssertionError as exc:
            left = sorted(p for p in tree if alive(p))
            raise AssertionError(
                f"{exc}: still alive {left}; log: {log.read_text()[-2000:]}"
            ) from None
    finally:
        if editor.poll() is None:
            editor.kill()
            editor.wait()
        for p, cmdline in tree.items():  # only what we saw, and only if it is still that
            if alive(p) and _cmdline(p) == cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)


SLUGGISH = "tests.fixtures.plugins:Sluggish"
UPDATES = 100_000  # ~330 bytes each: ~33 MB of small messages while the plugin dawdles


@pytest.mark.parametrize("mode", ["inprocess", "standalone"])
def test_slow_plugin_under_a_fast_stream_bounds_memory(make_chain, conductor, mode):
    """A plugin that takes 10 ms per update for its first 300, under an agent that streams
    100k small updates as fast as it can: the updates must wait in bounded buffers (or in
    the agent), not in memory of whoever runs the plugin. All arrive, in order."""
    chain = make_chain(
        plugin_block(SLUGGISH, mode, "sluggish", delay=0.01, slow_for=300)
        + script_agent_block("--flood", str(UPDATES), "--flood-bytes", "300")
    )
    peer = conductor(chain)
    session = start_session(peer)
    if mode == "inprocess":
        host = peer.proc.pid
    else:
        hosts = [p for p in descendants(peer.proc.pid) if b"proxy" in _cmdline(p).split(b"\0")]
        assert len(hosts) == 1, "the standalone `conductor proxy` process"
        host = hosts[0]
    peer.request(5, "session/prompt", prompt_params(session, "stream"))
    seen = 0
    while True:
        message = peer.read(timeout=STALL)
        if message.get("id") == 5:
            break
        text = message["params"]["update"]["content"]["text"]
        assert int(text[:8]) == seen, f"update {int(text[:8])} arrived where {seen} was due"
        seen += 1
    assert message["result"]["stopReason"] == "end_turn"
    assert seen == UPDATES
    for pid, who in {host: "the plugin's process", peer.proc.pid: "the conductor"}.items():
        peak = peak_rss(pid)
        assert peak < 100 * MiB, f"peak RSS of {who}: {peak / MiB:.0f} MiB"


PROGRESS_PIECES = 6  # prompts, each drawing 4 MB more of one progress bar (no newline)
PIECE = 4_000_000
LINE_BOUND = 64 * 1024  # a forwarded stderr line may be cut, but not grow without bound


def test_progress_bar_on_stderr_is_forwarded_in_bounded_pieces(make_chain, conductor):
    """A component draws a 24 MB progress bar on stderr (`\\r` between frames, no `\\n` until
    the end) while it answers prompts: the chain keeps answering, the bar is forwarded in
    bounded pieces with the component's name, and the conductor's memory stays bounded."""
    chain = make_chain(script_agent_block(name="noisy"))
    peer = conductor(chain)
    session = start_session(peer)
    for i, text in enumerate([*[f"progress {PIECE}"] * PROGRESS_PIECES, "progress end"]):
        peer.request(10 + i, "session/prompt", prompt_params(session, text))
        _, response = peer.response(10 + i, timeout=STALL)
        assert response["result"]["stopReason"] == "end_turn"
        peer.request(100 + i, "_test/echo", {"between": i})
        _, echo = peer.response(100 + i, timeout=STALL)
        assert echo["result"] == {"params": {"between": i}}
    peak, cpu = peak_rss(peer.proc.pid), cpu_seconds(peer.proc.pid)
    peer.close_stdin()
    assert peer.wait(timeout=STALL) == 0
    assert peer.stderr_closed.wait(timeout=STALL), "the conductor's stderr stayed open"
    lines = list(peer.stderr_lines)
    prefix = "[noisy] "
    longest = max(lines, key=len, default="")
    assert len(longest) <= LINE_BOUND + len(prefix), (
        f"a forwarded stderr line of {len(longest)} bytes ({cpu:.1f} s of conductor CPU): "
        f"{longest[:80]!r}..."
    )
    bar = [line for line in lines if line.startswith(prefix) and ".]" in line]
    assert bar, "no piece of the progress bar was forwarded with the component's name"
    assert peak < 100 * MiB, f"conductor peak RSS {peak / MiB:.0f} MiB ({cpu:.1f} s of CPU)"
