from conductor.plugin import Call


class Auditor:
    """Asks the agent something before each prompt, and tells the editor how it went."""

    async def on_session_prompt(self, call: Call) -> None:
        info = await call.ctx.request_agent("_demo/echo", {"audit": True})
        reply = await call.forward()  # the prompt goes on; we wait for its reply
        assert reply is not None
        call.ctx.notify_editor(
            "_audit/prompt",
            {"agentSaid": info, "stopReason": (reply.result or {}).get("stopReason")},
        )
