"""An editor over WebSocket (the `websockets` package) that starts a prompt and then vanishes.

Usage: ws_vanishing_client.py URL TOKEN

It initializes, opens a session, sends a prompt that makes the demo agent ask
for permission, prints "waiting" once that request has arrived, and then
blocks without answering: the test kills it with SIGKILL, so the server sees
the TCP connection drop without a close frame.
"""

from __future__ import annotations

import json
import sys
import time

from websockets.sync.client import connect


def main() -> None:
    url, token = sys.argv[1], sys.argv[2]
    ws = connect(url, additional_headers={"Authorization": f"Bearer {token}"}, proxy=None)

    def call(id: int, method: str, params: object) -> dict:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        while True:
            message = json.loads(ws.recv())
            if message.get("id") == id and "method" not in message:
                return message

    call(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    session = call(1, "session/new", {"cwd": "/tmp", "mcpServers": []})["result"]["sessionId"]
    prompt = [{"type": "text", "text": "please ask permission"}]
    ws.send(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/prompt",
                "params": {"sessionId": session, "prompt": prompt},
            }
        )
    )
    while json.loads(ws.recv()).get("method") != "session/request_permission":
        pass
    print("waiting", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
