"""ACP client built on the official ACP Python SDK (``agent-client-protocol``, module ``acp``).

Usage::

    python tests/peers/sdk_client.py [--prompt TEXT ...] [--prompt-file FILE]
        [--permission allow|reject|first] [--cwd DIR] [--timeout SECONDS] -- COMMAND ARGS...

Spawns COMMAND as an ACP agent over stdio (``acp.spawn_agent_process``), sends ``initialize``
(protocol v1), ``session/new`` and then each prompt in turn. Permission requests are answered
with the option whose kind is ``allow_once`` (``allow``, the default), ``reject_once``
(``reject``) or the first option offered (``first``); if no option matches, the ``cancelled``
outcome is sent.

A transcript is printed to stdout as JSON Lines, one object per event, in the order observed::

    {"event": "initialize", "result": {...}}
    {"event": "session_new", "result": {...}}
    {"event": "update", "params": {...}}              # each session/update notification
    {"event": "permission", "params": {...}, "answer": {...}}
    {"event": "prompt_response", "result": {...}}
    {"event": "error", "error": {...}}                # then exit status 1

The client advertises ``fs.readTextFile``/``fs.writeTextFile`` and serves them (recorded as
``{"event": "fs_read"|"fs_write", "params": ..., "answer"|"error": ...}``); other client
methods (terminal/*, elicitation, ``_*`` extensions) are answered with "Method not found".

Payloads are the SDK's pydantic models dumped with the wire (camelCase) field names, omitting
unset and null fields, i.e. the JSON the SDK received minus fields the SDK does not model.
Exit status 0 on success, 1 on any error or on timeout (``--timeout``, default 30 s), 2 on
usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from typing import Any

from acp import (
    CLIENT_METHODS,
    PROTOCOL_VERSION,
    Agent,
    Client,
    RequestError,
    spawn_agent_process,
    text_block,
)
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    FileSystemCapabilities,
    Implementation,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileRequest,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SessionInfoUpdate,
    SessionNotification,
    TerminalOutputResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileRequest,
    WriteTextFileResponse,
)
from pydantic import BaseModel

# Extra time granted after --timeout for subprocess clean-up before the watchdog hard-exits.
_WATCHDOG_GRACE_S = 10.0
_PERMISSION_KINDS = {"allow": "allow_once", "reject": "reject_once"}
_emit_lock = threading.Lock()


def dump(model: BaseModel) -> Any:
    """Serialize a received SDK model back to its wire JSON (camelCase names)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n"
    with _emit_lock:
        sys.stdout.buffer.write(line.encode("utf-8"))
        sys.stdout.buffer.flush()


def error_obj(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RequestError):
        return exc.to_error_obj()
    if isinstance(exc, TimeoutError):
        return {"type": "TimeoutError", "message": str(exc) or "timed out"}
    return {"type": type(exc).__name__, "message": str(exc)}


class TranscriptClient(Client):
    """SDK ``Client`` that records session updates and answers permission requests."""

    def __init__(self, permission: str) -> None:
        self._permission = permission

    def choose(self, options: list[PermissionOption]) -> RequestPermissionResponse:
        chosen: PermissionOption | None = None
        if self._permission == "first":
            chosen = options[0] if options else None
        else:
            wanted = _PERMISSION_KINDS[self._permission]
            chosen = next((o for o in options if o.kind == wanted), None)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        request = RequestPermissionRequest(
            session_id=session_id, tool_call=tool_call, options=options, field_meta=kwargs or None
        )
        answer = self.choose(options)
        emit("permission", params=dump(request), answer=dump(answer))
        return answer

    async def session_update(
        self,
        session_id: str,
        update: UserMessageChunk
        | AgentMessageChunk
        | AgentThoughtChunk
        | ToolCallStart
        | ToolCallProgress
        | AgentPlanUpdate
        | AgentPlanContentUpdate
        | AgentPlanRemovedUpdate
        | AvailableCommandsUpdate
        | CurrentModeUpdate
        | ConfigOptionUpdate
        | SessionInfoUpdate
        | UsageUpdate,
        **kwargs: Any,
    ) -> None:
        notification = SessionNotification(
            session_id=session_id, update=update, field_meta=kwargs or None
        )
        emit("update", params=dump(notification))

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        request = ReadTextFileRequest(
            session_id=session_id, path=path, line=line, limit=limit, field_meta=kwargs or None
        )
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines(keepends=True)
        except OSError as exc:
            emit("fs_read", params=dump(request), error={"message": str(exc)})
            raise RequestError.resource_not_found(path) from exc
        start = max((line or 1) - 1, 0)
        end = None if limit is None else start + limit
        answer = ReadTextFileResponse(content="".join(lines[start:end]))
        emit("fs_read", params=dump(request), answer=dump(answer))
        return answer

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        request = WriteTextFileRequest(
            session_id=session_id, path=path, content=content, field_meta=kwargs or None
        )
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(content)
        except OSError as exc:
            emit("fs_write", params=dump(request), error={"message": str(exc)})
            raise RequestError.internal_error({"details": str(exc)}) from exc
        answer = WriteTextFileResponse()
        emit("fs_write", params=dump(request), answer=dump(answer))
        return answer

    # Subclassing the ``Client`` protocol inherits stubs returning ``None``; make unsupported
    # requests fail loudly instead of answering ``null``.
    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_create"])

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_output"])

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_release"])

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_wait_for_exit"])

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_kill"])

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise RequestError.method_not_found(CLIENT_METHODS["elicitation_create"])

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    def on_connect(self, conn: Agent) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


async def run(args: argparse.Namespace, command: list[str]) -> None:
    client = TranscriptClient(args.permission)
    cwd = os.path.abspath(args.cwd or os.getcwd())
    async with spawn_agent_process(
        client,
        command[0],
        *command[1:],
        # spawn_agent_process otherwise passes only a trimmed environment (HOME, PATH, ...).
        env=dict(os.environ),
        # The default stderr=PIPE is never read by the SDK: inherit it so the agent can't block.
        transport_kwargs={"stderr": None},
    ) as (conn, _process):
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                # The SDK serializes requests with exclude_defaults=True, so an all-default
                # ClientCapabilities() would not be sent at all. We do serve fs/* requests.
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                terminal=False,
            ),
            client_info=Implementation(name="sdk-client", title="SDK test client", version="0.1.0"),
        )
        emit("initialize", result=dump(init))
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        emit("session_new", result=dump(session))
        for text in args.prompt:
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block(text)])
            emit("prompt_response", result=dump(response))


async def run_with_timeout(args: argparse.Namespace, command: list[str]) -> int:
    try:
        async with asyncio.timeout(args.timeout):
            await run(args, command)
    except TimeoutError as exc:
        emit("error", error=error_obj(exc) | {"message": f"timed out after {args.timeout} s"})
        return 1
    except Exception as exc:
        emit("error", error=error_obj(exc))
        return 1
    return 0


def read_prompt_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="sdk_client.py",
        usage="%(prog)s [--prompt TEXT ...] [--prompt-file FILE] [--permission allow|reject|first] "
        "[--cwd DIR] [--timeout SECONDS] -- COMMAND ARGS...",
        description="Drive an ACP agent with the official Python SDK; print a JSONL transcript.",
    )
    parser.add_argument("--prompt", action="extend", nargs="+", default=[], metavar="TEXT")
    parser.add_argument(
        "--prompt-file",
        dest="prompt",
        action="append",
        type=read_prompt_file,
        metavar="FILE",
        help="send FILE's contents (UTF-8) as one prompt (for prompts too big for argv)",
    )
    parser.add_argument("--permission", choices=["allow", "reject", "first"], default="allow")
    parser.add_argument("--cwd", default=None, help="cwd for session/new (default: current dir)")
    parser.add_argument("--timeout", type=float, default=30.0, help="overall timeout in seconds")
    if "--" not in argv:
        parser.error("missing '-- COMMAND ARGS...'")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command:
        parser.error("missing COMMAND after '--'")
    return args, command


def start_watchdog(timeout: float) -> None:
    """Hard exit if the asyncio run (including subprocess clean-up) overruns badly."""

    def fire() -> None:
        emit("error", error={"type": "Watchdog", "message": f"hard timeout after {timeout} s"})
        os._exit(1)

    timer = threading.Timer(timeout + _WATCHDOG_GRACE_S, fire)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    args, command = parse_args(sys.argv[1:] if argv is None else argv)
    start_watchdog(args.timeout)
    return asyncio.run(run_with_timeout(args, command))


if __name__ == "__main__":
    sys.exit(main())
