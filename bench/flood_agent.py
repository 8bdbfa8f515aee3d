#!/usr/bin/env python3
"""A minimal, correct ACP agent for bench/flood.py: slow on purpose, or a fast streamer.

    python bench/flood_agent.py [--delay 0.003] [--updates N --update-size BYTES]

It reads one line at a time from stdin and spends `--delay` seconds on every input line
before handling it (a slow agent: ~3 ms per line by default), so a flood of pipelined
prompts piles up in front of it. Each `session/prompt` is answered with one
`session/update` (the prompt's text echoed, "You said: ..." like the demo agent) and then
the response. With `--updates N`, a prompt is answered with N updates of `--update-size`
characters instead, each starting with its zero-padded index ("000000042 xxx..."), written
as fast as the pipe takes them (a fast streamer whose updates are big without the prompt
being big). Stdlib only; protocol version 1; diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

INDEX_DIGITS = 9


def write(msg: dict[str, Any]) -> None:
    data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def update(session: Any, text: str) -> dict[str, Any]:
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session, "update": chunk},
    }


def prompt_text(params: Any) -> str:
    blocks = params.get("prompt") if isinstance(params, dict) else None
    return "\n".join(
        b["text"] for b in blocks or [] if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.003, help="seconds per input line")
    parser.add_argument("--updates", type=int, default=0, help="updates per prompt (0: one echo)")
    parser.add_argument("--update-size", type=int, default=8192, help="characters per update")
    args = parser.parse_args()
    filler = "x" * max(0, args.update_size - INDEX_DIGITS - 1)
    sessions = 0
    stdin = sys.stdin.buffer
    try:
        for line in stdin:
            if not line.strip():
                continue
            if args.delay:
                time.sleep(args.delay)
            try:
                msg = json.loads(line)
            except ValueError:
                write(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32700, "message": "Parse error"},
                    }
                )
                continue
            if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
                continue  # notifications (session/cancel, ...) and stray responses
            rid, method, params = msg["id"], msg["method"], msg.get("params")
            if method == "initialize":
                result: dict[str, Any] = {
                    "protocolVersion": 1,
                    "agentCapabilities": {"loadSession": False},
                    "authMethods": [],
                    "agentInfo": {"name": "bench-flood-agent", "version": "0"},
                }
            elif method == "session/new":
                sessions += 1
                result = {"sessionId": f"flood-{sessions}"}
            elif method == "session/prompt":
                session = params.get("sessionId") if isinstance(params, dict) else None
                if args.updates:
                    for i in range(args.updates):
                        write(update(session, f"{i:0{INDEX_DIGITS}d} {filler}"))
                else:
                    write(update(session, f"You said: {prompt_text(params)}"))
                result = {"stopReason": "end_turn"}
            else:
                error = {"code": -32601, "message": f"Method not found: {method}"}
                write({"jsonrpc": "2.0", "id": rid, "error": error})
                continue
            write({"jsonrpc": "2.0", "id": rid, "result": result})
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
