from conductor.acp import chunk_text, set_chunk_text
from conductor.plugin import Call


class Prefix:
    def __init__(self, prefix: str = "> ") -> None:
        self.prefix = prefix

    async def on_session_update(self, call: Call) -> None:
        text = chunk_text(call.params)
        if text is not None:
            set_chunk_text(call.params, self.prefix + text)
