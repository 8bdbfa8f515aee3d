"""Echo agent built on the official ACP Python SDK (``agent-client-protocol``, module ``acp``).

Written in the style of the SDK repository's ``examples/echo_agent.py`` (the wheel ships no
examples). Run it as a subprocess speaking ACP (protocol v1) over stdio::

    python tests/peers/sdk_echo_agent.py

Behaviour:

* ``initialize`` answers protocol version 1 (``acp.PROTOCOL_VERSION``).
* ``session/new`` returns a fresh random session id.
* ``session/prompt`` echoes the prompt's text blocks as two ``agent_message_chunk`` updates,
  ``"Echo: "`` and the text. If the text contains the word ``permission`` it first asks
  ``session/request_permission`` (options ``allow``/allow_once and ``reject``/reject_once) and
  then sends a third chunk ``" [permission: <optionId>]"`` (``cancelled`` if the client answered
  with the cancelled outcome). Returns stopReason ``end_turn`` (``cancelled`` if a
  ``session/cancel`` arrived while the turn was running).
* Everything else (session/load, authenticate, ``_*`` extension requests, ...) is answered with
  "Method not found"; extension notifications are ignored.

Nothing but JSON-RPC is written to stdout; logging goes to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from typing import Any
from uuid import uuid4

from acp import (
    AGENT_METHODS,
    PROTOCOL_VERSION,
    Agent,
    AuthenticateResponse,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    run_agent,
    update_agent_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AllowedOutcome,
    AudioContentBlock,
    ClientCapabilities,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    HttpMcpServer,
    ImageContentBlock,
    Implementation,
    ListSessionsResponse,
    McpServerStdio,
    PermissionOption,
    ResourceContentBlock,
    ResumeSessionResponse,
    SseMcpServer,
    TextContentBlock,
    ToolCallUpdate,
)

PERMISSION_WORD = re.compile(r"\bpermission\b", re.IGNORECASE)

PERMISSION_OPTIONS = [
    PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="reject", name="Reject once", kind="reject_once"),
]


class EchoAgent(Agent):
    _conn: Client

    def __init__(self) -> None:
        self._sessions: set[str] = set()
        self._cancelled: set[str] = set()
        self._tool_calls = 0

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(
                name="sdk-echo-agent", title="SDK Echo Agent", version="0.1.0"
            ),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio]
        | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = uuid4().hex
        self._sessions.add(session_id)
        return NewSessionResponse(session_id=session_id)

    async def prompt(
        self,
        session_id: str,
        prompt: list[
            TextContentBlock
            | ImageContentBlock
            | AudioContentBlock
            | ResourceContentBlock
            | EmbeddedResourceContentBlock
        ],
        **kwargs: Any,
    ) -> PromptResponse:
        if session_id not in self._sessions:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "details": "unknown session"}
            )
        self._cancelled.discard(session_id)
        text = "".join(block.text for block in prompt if isinstance(block, TextContentBlock))

        choice: str | None = None
        if PERMISSION_WORD.search(text):
            choice = await self._ask_permission(session_id, text)

        chunks = ["Echo: ", text]
        if choice is not None:
            chunks.append(f" [permission: {choice}]")
        for chunk in chunks:
            await self._conn.session_update(
                session_id=session_id, update=update_agent_message_text(chunk)
            )

        if session_id in self._cancelled:
            self._cancelled.discard(session_id)
            return PromptResponse(stop_reason="cancelled")
        return PromptResponse(stop_reason="end_turn")

    async def _ask_permission(self, session_id: str, text: str) -> str:
        self._tool_calls += 1
        tool_call = ToolCallUpdate(
            tool_call_id=f"echo-{self._tool_calls}",
            title="Echo the prompt",
            kind="other",
            status="pending",
            raw_input={"text": text},
        )
        response = await self._conn.request_permission(
            session_id=session_id, tool_call=tool_call, options=PERMISSION_OPTIONS
        )
        outcome = response.outcome
        if isinstance(outcome, AllowedOutcome):
            return outcome.option_id
        return "cancelled"

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._cancelled.add(session_id)

    # Subclassing the ``Agent`` protocol inherits stub methods that return ``None`` (answered as
    # ``"result": null`` / ``{}``); override everything we don't support so that those requests,
    # including unknown ``_*`` extension requests, get a proper "Method not found" error.
    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["authenticate"])

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio]
        | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_load"])

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_list"])

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_set_mode"])

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_set_config_option"])

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio]
        | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_fork"])

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio]
        | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_resume"])

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_close"])

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


async def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    await run_agent(EchoAgent())


if __name__ == "__main__":
    asyncio.run(main())
