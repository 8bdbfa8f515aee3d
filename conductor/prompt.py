"""`conductor prompt`: try a chain from a terminal, without an editor.

It runs `conductor run CHAIN` as a child process and plays the editor:
initialize, open a session, send the prompt, stream the reply, answer
permission requests, and exit with a status that reflects the stop reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import trio

from . import __version__
from .acp import permission_options, permission_title
from .client import ClientConnection, ConnectionLost, RpcError

STOP_STATUS = {"end_turn": 0, "max_tokens": 3, "max_turn_requests": 3, "refusal": 4, "cancelled": 5}


@attrs.define
class PromptOptions:
    chain: Path
    texts: list[str]
    protocol: int = 1
    permission: str = "ask"  # "yes", "no" or "ask"
    cwd: str = attrs.field(factory=os.getcwd)
    conductor_args: list[str] = attrs.field(factory=list)


@attrs.define
class _Turn:
    """What the terminal shows of one session, and when a v2 turn has ended."""

    session_id: str | None = None
    stop_reason: str | None = None
    idle: trio.Event = attrs.field(factory=trio.Event)
    wrote_text: bool = False


class PromptClient:
    """Plays the editor for one run of `conductor prompt`."""

    def __init__(self, options: PromptOptions) -> None:
        self.options = options
        self.turn = _Turn()

    def out(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    async def on_notification(self, method: str, params: Any) -> None:
        if method != "session/update" or not isinstance(params, dict):
            return
        update = params.get("update") or {}
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content") or {}
            if content.get("type") == "text":
                self.out(content.get("text", ""))
                self.turn.wrote_text = True
        elif kind == "agent_thought_chunk":
            content = update.get("content") or {}
            self.note(f"(thinking) {content.get('text', '')}")
        elif kind in ("tool_call", "tool_call_update"):
            title = update.get("title") or update.get("toolCallId", "")
            self.note(f"[tool] {title} {update.get('status', '')}".rstrip())
        elif kind == "state_update" and update.get("state") == "idle":
            self.turn.stop_reason = update.get("stopReason")
            self.turn.idle.set()

    async def on_request(self, method: str, params: Any) -> Any:
        if method == "session/request_permission":
            return {"outcome": await self.decide_permission(params or {})}
        raise RpcError({"code": -32601, "message": "Method not found", "data": method})

    async def decide_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        options = permission_options(params)
        title = permission_title(params) or "a tool call"
        choice = self.options.permission
        if choice == "ask" and not sys.stdin.isatty():
            self.note(f"[permission] {title}: rejected (not a terminal; use --yes to allow)")
            choice = "no"
        if choice == "ask":
            answer = await trio.to_thread.run_sync(
                lambda: input(f"\n[permission] allow {title}? [y/N] "), abandon_on_cancel=True
            )
            choice = "yes" if answer.strip().lower() in ("y", "yes") else "no"
        wanted = "allow" if choice == "yes" else "reject"
        for option in options:
            if str(option.get("kind", "")).startswith(wanted):
                self.note(f"[permission] {title}: {option.get('name', option.get('optionId'))}")
                return {"outcome": "selected", "optionId": option["optionId"]}
        return {"outcome": "cancelled"}

    async def run(self) -> int:
        command = [
            sys.executable,
            "-m",
            "conductor",
            *self.options.conductor_args,
            "run",
            str(self.options.chain),
        ]
        async with trio.open_nursery() as nursery:
            process = await nursery.start(
                lambda task_status=trio.TASK_STATUS_IGNORED: trio.run_process(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=None,
                    check=False,
                    task_status=task_status,
                )
            )
            assert process.stdin is not None and process.stdout is not None
            connection = ClientConnection(
                process.stdin, process.stdout, self.on_request, self.on_notification
            )
            nursery.start_soon(connection.serve)
            try:
                status = await self.converse(connection)
            finally:
                await process.stdin.aclose()
            await connection.closed.wait()
        return status

    async def converse(self, connection: ClientConnection) -> int:
        try:
            init = await connection.request(
                "initialize",
                {
                    "protocolVersion": self.options.protocol,
                    "clientCapabilities": {
                        "fs": {"readTextFile": False, "writeTextFile": False},
                        "terminal": False,
                    }
                    if self.options.protocol == 1
                    else {},
                    "clientInfo": {"name": "conductor-prompt", "version": __version__},
                }
                if self.options.protocol == 1
                else {
                    "protocolVersion": self.options.protocol,
                    "info": {"name": "conductor-prompt", "version": __version__},
                    "capabilities": {},
                },
            )
            self.note(f"[initialized: protocol {init.get('protocolVersion')}]")
            session = await connection.request(
                "session/new", {"cwd": self.options.cwd, "mcpServers": []}
            )
            self.turn.session_id = session["sessionId"]
            status = 0
            for text in self.options.texts:
                status = await self.prompt(connection, text)
                if status:
                    break
            return status
        except RpcError as exc:
            self.note(f"error: {exc}: {exc.error.get('data', '')}")
            return 1
        except ConnectionLost as exc:
            self.note(f"error: {exc}")
            return 1

    async def prompt(self, connection: ClientConnection, text: str) -> int:
        self.turn.idle = trio.Event()
        self.turn.stop_reason = None
        self.turn.wrote_text = False
        result = await connection.request(
            "session/prompt",
            {"sessionId": self.turn.session_id, "prompt": [{"type": "text", "text": text}]},
        )
        if self.options.protocol >= 2:
            await self.turn.idle.wait()
            stop = self.turn.stop_reason
        else:
            stop = (result or {}).get("stopReason")
        if self.turn.wrote_text:
            self.out("\n")
        self.note(f"[stop reason: {stop}]")
        return STOP_STATUS.get(str(stop), 6)


def run_prompt(options: PromptOptions) -> int:
    return trio.run(PromptClient(options).run)
