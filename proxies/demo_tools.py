"""A proxy that offers the agent two MCP tools: the smallest useful `@tool` example.

Each method marked `@tool` becomes an MCP tool of this proxy's server, which
is declared in every session the agent opens; the input schema comes from
the signature and the description from the docstring.
"""

from __future__ import annotations

from conductor.plugin import ToolCall, tool


class DemoToolsProxy:
    mcp_server_name = "demo-tools"

    @tool
    async def echo(self, text: str) -> str:
        """Return the text unchanged."""
        return text

    @tool
    async def word_count(self, text: str, call: ToolCall) -> dict[str, int]:
        """Count the words and characters of a text (and the calls made in this session)."""
        call.state["calls"] = call.state.get("calls", 0) + 1
        return {"words": len(text.split()), "characters": len(text), "calls": call.state["calls"]}
