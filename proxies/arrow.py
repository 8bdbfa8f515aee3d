"""arrow: marks the start of each agent reply with a prefix (the reference example).

[[proxy]]
plugin = "proxies.arrow:ArrowProxy"
options = { prefix = "> " }
"""

from conductor.acp import chunk_text, set_chunk_text
from conductor.plugin import Call


class ArrowProxy:
    def __init__(self, prefix: str = "> ") -> None:
        self.prefix = prefix

    async def on_session_prompt(self, call: Call) -> None:
        call.state["reply_started"] = False  # per-session: the next text starts a reply

    async def on_session_update(self, call: Call) -> None:
        text = chunk_text(call.params)
        if text is not None and not call.state.get("reply_started", False):
            call.state["reply_started"] = True
            set_chunk_text(call.params, self.prefix + text)
