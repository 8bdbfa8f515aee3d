"""The official Python MCP client (`mcp` on PyPI) as an agent's MCP client would use it.

    python mcp_py_client.py MODE DECLARATION_JSON STEPS_JSON

MODE is the client's `mode` ("2026-07-28", "legacy", "auto"). DECLARATION is
an ACP MCP server declaration as the agent received it (`http` with url and
headers, or stdio with command, args and env). STEPS is a list of
`["list"]`, `["call", name, arguments]`, `["progress", name, arguments]` or
`["cancel", name, arguments]`. One JSON line is printed per step.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(value: Any) -> None:
    print(json.dumps(value), flush=True)


def tool_result(result: Any) -> dict[str, Any]:
    return {
        "isError": bool(result.is_error),
        "text": [c.text for c in result.content if c.type == "text"],
        "structured": result.structured_content,
    }


async def with_progress(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    seen: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append([progress, total, message])

    result = await client.call_tool(name, arguments, progress_callback=on_progress)
    return {"call": tool_result(result), "progress": seen}


async def cancelled_after_progress(
    client: Client, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Give up on a call at its first progress report (the client cancels it)."""
    with anyio.move_on_after(30) as timeout:
        async with anyio.create_task_group() as group:

            async def on_progress(*_: Any) -> None:
                group.cancel_scope.cancel()

            async def call() -> None:
                await client.call_tool(name, arguments, progress_callback=on_progress)

            group.start_soon(call)
    return {"cancelled": not timeout.cancelled_caught}


async def run_steps(client: Client, steps: list[Any]) -> None:
    emit({"negotiated": client.session.protocol_version})
    for kind, *args in steps:
        if kind == "list":
            tools = await client.list_tools()
            emit({"tools": [t.model_dump(mode="json", exclude_none=True) for t in tools.tools]})
        elif kind == "call":
            emit({"call": tool_result(await client.call_tool(*args))})
        elif kind == "progress":
            emit(await with_progress(client, *args))
        elif kind == "cancel":
            emit(await cancelled_after_progress(client, *args))


async def main(mode: str, declaration: dict[str, Any], steps: list[Any]) -> None:
    if declaration.get("url"):
        headers = {h["name"]: h["value"] for h in declaration.get("headers", [])}
        async with create_mcp_http_client(headers=headers) as http:
            transport = streamable_http_client(declaration["url"], http_client=http)
            async with Client(transport, mode=mode) as client:
                await run_steps(client, steps)
    else:
        env = {**os.environ, **{e["name"]: e["value"] for e in declaration.get("env", [])}}
        params = StdioServerParameters(
            command=declaration["command"], args=declaration.get("args", []), env=env
        )
        async with Client(params, mode=mode) as client:
            await run_steps(client, steps)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]))
