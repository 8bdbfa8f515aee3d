"""The stdio MCP server command the polyfill hands to agents without HTTP MCP.

The agent starts it like any stdio MCP server; it connects to the polyfill's
loopback listener and relays lines both ways, nothing more. The handshake
logic lives in the polyfill, so this stays tiny, stdlib-only and quick to
start (it runs as `python -I mcp_bridge.py`). Where to connect and the
credential come in the environment, never on the command line, so they do
not show in `ps`:

    ACP_CONDUCTOR_MCP_ADDRESS  127.0.0.1:PORT
    ACP_CONDUCTOR_MCP_TOKEN    the declaration's secret
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

ADDRESS = "ACP_CONDUCTOR_MCP_ADDRESS"
TOKEN = "ACP_CONDUCTOR_MCP_TOKEN"


def _fail(message: str) -> int:
    print(f"acp-conductor MCP bridge: {message}", file=sys.stderr, flush=True)
    return 1


def _upstream(sock: socket.socket) -> None:
    """Lines from the polyfill to our stdout; the process ends when the polyfill closes."""
    out = sys.stdout.buffer
    with sock.makefile("rb") as lines:
        for line in lines:
            out.write(line)
            out.flush()
    os._exit(0)


def main() -> int:
    address, token = os.environ.get(ADDRESS), os.environ.get(TOKEN)
    if not address or not token:
        return _fail(f"{ADDRESS} and {TOKEN} must be set (this command is started by the agent)")
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)))
    except (OSError, ValueError) as exc:
        return _fail(f"cannot reach the conductor at {address}: {exc}")
    sock.sendall(json.dumps({"token": token}).encode() + b"\n")
    upstream = threading.Thread(target=_upstream, args=(sock,), daemon=True)
    upstream.start()
    for line in sys.stdin.buffer:
        try:
            sock.sendall(line if line.endswith(b"\n") else line + b"\n")
        except OSError:
            break
    try:
        sock.shutdown(socket.SHUT_WR)  # the polyfill answers what is in flight, then closes
    except OSError:
        return 0
    upstream.join(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
