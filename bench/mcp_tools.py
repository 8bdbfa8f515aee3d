"""Benchmark: MCP tool calls through the polyfill, against a plain MCP server.

Not a test: run it on demand and read the table (needs the test extras, for the
official `mcp` client). The same client (the `mcp` package, 2026-07-28 and
handshake modes) calls an `echo` tool N times:

- directly on an MCP server built with the same SDK (stdio), the baseline;
- on the `demo_tools` proxy's `@tool`, through the conductor and the polyfill,
  over its loopback HTTP endpoint and over the stdio bridge.

Configurations alternate round by round; each row reports the median per-call
time and its ratio to the baseline measured in the same run.

    python bench/mcp_tools.py [--calls 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("baseline")
@server.tool()
async def echo(text: str) -> str:
    "Return the text unchanged."
    return text
server.run("stdio")
"""


def client_loop(mode: str, declaration: dict[str, Any], calls: int) -> float:
    """Seconds per call, measured inside one client process (connection set up first)."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def run(client: Client) -> float:
        await client.call_tool("echo", {"text": "warm"})
        start = time.perf_counter()
        for n in range(calls):
            await client.call_tool("echo", {"text": f"call {n}"})
        return (time.perf_counter() - start) / calls

    async def main() -> float:
        if declaration.get("url"):
            headers = {h["name"]: h["value"] for h in declaration["headers"]}
            async with create_mcp_http_client(headers=headers) as http:
                transport = streamable_http_client(declaration["url"], http_client=http)
                async with Client(transport, mode=mode) as client:
                    return await run(client)
        env = {e["name"]: e["value"] for e in declaration.get("env", [])}
        params = StdioServerParameters(
            command=declaration["command"], args=declaration.get("args", []), env=env or None
        )
        async with Client(params, mode=mode) as client:
            return await run(client)

    return anyio.run(main)


def measure(mode: str, declaration: dict[str, Any], calls: int) -> float:
    done = subprocess.run(
        [PY, __file__, "--client", mode, json.dumps(declaration), str(calls)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip())


class Chain:
    """demo_tools -> polyfill -> demo agent, held open; the agent's declaration is read back."""

    def __init__(self, folder: Path, polyfill_mode: str) -> None:
        record = folder / f"agent-{polyfill_mode}.jsonl"
        chain = folder / f"chain-{polyfill_mode}.toml"
        chain.write_text(
            '[[proxy]]\nplugin = "demo_tools"\n'
            f'[[proxy]]\nplugin = "mcp_over_acp"\noptions = {{ mode = "{polyfill_mode}" }}\n'
            f'[agent]\ncommand = ["{PY}", "-m", "conductor.demo_agent", "--record", "{record}"]\n'
        )
        self.proc = subprocess.Popen(
            [PY, "-m", "conductor", "run", str(chain)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        self.ask(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        self.ask(1, "session/new", {"cwd": str(folder), "mcpServers": []})
        news = [json.loads(line) for line in record.read_text().splitlines()]
        self.declaration = next(m for m in news if m.get("method") == "session/new")["params"][
            "mcpServers"
        ][0]

    def ask(self, request_id: int, method: str, params: Any) -> None:
        assert self.proc.stdin and self.proc.stdout
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        while json.loads(self.proc.stdout.readline()).get("id") != request_id:
            pass

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server = folder / "server.py"
        server.write_text(SERVER)
        http, stdio = Chain(folder, "http"), Chain(folder, "stdio")
        configs = {
            "plain MCP server (stdio)": {"command": PY, "args": [str(server)]},
            "polyfill, HTTP endpoint": http.declaration,
            "polyfill, stdio bridge": stdio.declaration,
        }
        results: dict[tuple[str, str], list[float]] = {}
        try:
            for _ in range(args.rounds):
                for mode in ("2026-07-28", "legacy"):
                    for label, declaration in configs.items():
                        seconds = measure(mode, declaration, args.calls)
                        results.setdefault((label, mode), []).append(seconds)
        finally:
            http.close()
            stdio.close()
    print(f"MCP tools/call round trip, {args.calls} calls x {args.rounds} rounds (medians)")
    print(f"| {'configuration':<26} | {'client mode':<11} | {'per call':>9} | {'ratio':>5} |")
    print(f"| {'-' * 26} | {'-' * 11} | {'-' * 9} | {'-' * 5} |")
    for mode in ("2026-07-28", "legacy"):
        base = statistics.median(results[("plain MCP server (stdio)", mode)])
        for label in configs:
            value = statistics.median(results[(label, mode)])
            print(f"| {label:<26} | {mode:<11} | {value * 1e6:>6.0f} µs | {value / base:>5.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        print(client_loop(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])))
    else:
        main()
