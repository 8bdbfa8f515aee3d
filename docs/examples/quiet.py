from conductor.acp import update_kind
from conductor.plugin import Call


class NoThoughts:
    """Drops the agent's thought chunks; everything else passes untouched."""

    async def on_session_update(self, call: Call) -> None:
        if update_kind(call.params) == "agent_thought_chunk":
            call.drop()
