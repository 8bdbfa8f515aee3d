"""The demo agent's MCP client: stdio servers, the initialize handshake, blocking calls.

It speaks MCP the way most agents in the field do today (the 2025-11-25
handshake over stdio), which is exactly what the MCP-over-ACP polyfill has to
serve. Calls block, so the demo agent runs them on a worker thread.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
from typing import Any

import orjson

PROTOCOL_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "conductor-demo-agent", "version": "1"}


class McpError(Exception):
    """An MCP server that could not be started, or answered with an error."""


class StdioMcpClient:
    """One stdio MCP server process, initialized on first use."""

    def __init__(self, declaration: dict[str, Any]) -> None:
        self.name = str(declaration.get("name", "mcp"))
        env = {**os.environ}
        for variable in declaration.get("env") or []:
            env[str(variable["name"])] = str(variable["value"])
        argv = [str(declaration["command"]), *(str(a) for a in declaration.get("args") or [])]
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
        except OSError as exc:
            raise McpError(f"cannot start MCP server {self.name!r}: {exc}") from None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.tools: list[dict[str, Any]] = []
        self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": CLIENT_INFO,
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.tools = list(self.request("tools/list", {}).get("tools") or [])

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its answer (notifications before it are skipped)."""
        assert self.process.stdout is not None
        with self._lock:
            request_id = next(self._ids)
            try:
                self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
                for line in self.process.stdout:
                    message = orjson.loads(line)
                    if message.get("id") == request_id and "method" not in message:
                        break
                else:
                    raise McpError(f"MCP server {self.name!r} closed its output")
            except (OSError, ValueError) as exc:
                raise McpError(f"MCP server {self.name!r} failed: {exc}") from None
        if "error" in message:
            error = message["error"]
            raise McpError(f"{method} failed: {error.get('message')} ({error.get('code')})")
        result = message.get("result")
        return result if isinstance(result, dict) else {}

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def call_tool(
    clients: list[StdioMcpClient], name: str, arguments: dict[str, Any]
) -> tuple[str, bool]:
    """Call tool `name` on whichever server offers it: (its text, whether it is an error)."""
    for client in clients:
        if any(tool.get("name") == name for tool in client.tools):
            result = client.request("tools/call", {"name": name, "arguments": arguments})
            texts = [
                block.get("text", "")
                for block in result.get("content") or []
                if isinstance(block, dict) and block.get("type") == "text"
            ]
            return "\n".join(texts), bool(result.get("isError"))
    offered = sorted(t.get("name", "?") for c in clients for t in c.tools)
    raise McpError(f"no MCP server offers a tool named {name!r} (offered: {offered})")
