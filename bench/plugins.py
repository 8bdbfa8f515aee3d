"""Plugins for the benchmarks: one that does nothing, one that looks at every update, and one
that is slow on every update (bench/flood.py)."""

import trio

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


class Slow:
    """Spends `delay` seconds (awaiting, not on CPU) on every session/update: a fast agent
    behind it produces updates faster than they can pass, so they must be held back."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay

    async def on_session_update(self, call: Call) -> None:
        await trio.sleep(self.delay)
