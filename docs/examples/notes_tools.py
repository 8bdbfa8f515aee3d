from conductor.plugin import ToolCall, ToolError, tool


class Notes:
    """Gives the agent a per-session notepad as two MCP tools."""

    mcp_server_name = "notes"

    @tool
    async def remember(self, note: str, call: ToolCall) -> str:
        """Keep a note for later in this session."""
        call.state.setdefault("notes", []).append(note)
        return f"noted ({len(call.state['notes'])} so far)"

    @tool
    async def recall(self, call: ToolCall, last: int = 10) -> list[str]:
        """The most recent notes of this session."""
        notes = call.state.get("notes", [])
        if not notes:
            raise ToolError("nothing noted yet")
        return notes[-last:]
