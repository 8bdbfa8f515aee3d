from conductor.acp import add_prompt_text
from conductor.plugin import Call


class PromptCounter:
    """Numbers the prompts of each session: state lives as long as the chain."""

    async def on_session_prompt(self, call: Call) -> None:
        call.state["prompts"] = call.state.get("prompts", 0) + 1
        add_prompt_text(call.params, f"(prompt {call.state['prompts']})")

    async def on_counter_get(self, call: Call) -> None:
        # `_counter/get` never reaches the agent: the proxy answers it.
        call.respond({"prompts": call.ctx.session(call.params["sessionId"]).get("prompts", 0)})
