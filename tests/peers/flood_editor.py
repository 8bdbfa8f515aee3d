"""An editor that floods a conductor with pipelined prompts, to be SIGKILLed mid-flood.

Usage: flood_editor.py CHAIN PIDFILE COUNT TEXT_BYTES STDERR_FILE

It starts `conductor run --grace 1 CHAIN` itself (so the conductor is its child, not the
test's), opens a session, then writes COUNT `session/prompt` requests of TEXT_BYTES text
each from one thread while another thread reads everything the conductor writes. Midway
(half the flood written, or the conductor not taking more for a second) it writes the
conductor's pid to PIDFILE and waits to be killed: the conductor then finds its editor
gone in the middle of the traffic.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

STILL = 1.0  # seconds without progress in our writes that also count as midway


def main() -> None:
    chain, pidfile, count, size, stderr_file = sys.argv[1:6]
    with open(stderr_file, "wb") as err:
        conductor = subprocess.Popen(
            [sys.executable, "-m", "conductor", "run", "--grace", "1", chain],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert conductor.stdin is not None and conductor.stdout is not None
    stdin, stdout = conductor.stdin, conductor.stdout

    def send(message: dict[str, Any]) -> None:
        stdin.write(json.dumps(message).encode() + b"\n")
        stdin.flush()

    def answer(id: int) -> dict[str, Any]:
        while True:
            message = json.loads(stdout.readline())
            if message.get("id") == id and "method" not in message:
                return message

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    answer(0)
    send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/tmp"}})
    session = answer(1)["result"]["sessionId"]

    def read_all() -> None:
        while stdout.read1(1 << 16):
            pass

    threading.Thread(target=read_all, daemon=True).start()
    prompt = [{"type": "text", "text": "x" * int(size)}]
    flood = b"".join(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 100 + i,
                "method": "session/prompt",
                "params": {"sessionId": session, "prompt": prompt},
            }
        ).encode()
        + b"\n"
        for i in range(int(count))
    )
    written = [0]

    def write_all() -> None:
        fd = stdin.fileno()
        view = memoryview(flood)
        with contextlib.suppress(OSError):
            while written[0] < len(view):
                written[0] += os.write(fd, view[written[0] : written[0] + (1 << 16)])

    threading.Thread(target=write_all, daemon=True).start()
    # Midway: half the flood is written, or the conductor has stopped taking it (a pause in
    # our writes). Either way requests are in flight when the test kills us.
    last, still = 0, 0.0
    while written[0] < len(flood) // 2 and still < STILL:
        time.sleep(0.05)
        still = still + 0.05 if written[0] == last else 0.0
        last = written[0]
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(conductor.pid))
    os.replace(pidfile + ".tmp", pidfile)
    time.sleep(600)  # the test kills us long before


if __name__ == "__main__":
    main()
