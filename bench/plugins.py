"""Plugins for the benchmark: one that does nothing, one that looks at every update."""

from conductor.acp import chunk_text
from conductor.plugin import Call


class PassThrough:
    """No hooks: the conductor lets traffic pass it without a visit."""


class Inspecting:
    """Reads every session/update, so each one visits the plugin (the worst realistic case)."""

    def __init__(self) -> None:
        self.chars = 0

    async def on_session_update(self, call: Call) -> None:
        self.chars += len(chunk_text(call.params) or "")
