"""`conductor prompt`: try a chain from a terminal, without an editor.

It runs `conductor run CHAIN` as a child process (in its own process group,
so Ctrl-C reaches only this client) and plays the editor: initialize, open a
session, send each prompt, stream the reply, answer permission requests, and
exit with a status that reflects the stop reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from . import __version__, wsio
from .acp import permission_options, permission_title
from .client import ClientConnection, ConnectionLost, RpcError, WebSocketClientConnection
from .protocol import METHOD_NOT_FOUND

STOP_STATUS = {"end_turn": 0, "max_tokens": 3, "max_turn_requests": 3, "refusal": 4, "cancelled": 5}
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
STATUS_MARK = {
    "completed": "✓",
    "in_progress": "…",
    "pending": "·",
    "failed": "✗",
    "cancelled": "✗",
}


@attrs.define
class PromptOptions:
    chain: Path | None
    texts: list[str]
    protocol: int = 1
    permission: str = "ask"  # "yes", "no" or "ask"
    cwd: str = attrs.field(factory=os.getcwd)
    conductor_args: list[str] = attrs.field(factory=list)
    json: bool = False  # print the raw session/update stream instead of text
    repl: bool = False  # read further prompts from stdin, a line each
    connect: str | None = None  # a served chain's ws:// URL instead of spawning CHAIN
    headers: dict[str, str] = attrs.field(factory=dict)  # sent with --connect


class Style:
    """ANSI styling for stderr when it is a terminal (and NO_COLOR is unset); plain otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text


@attrs.define
class _Turn:
    """What one prompt turn has shown so far, and how it ended."""

    stop_reason: str | None = None
    idle: trio.Event = attrs.field(factory=trio.Event)
    wrote_text: bool = False
    first_update: trio.Event = attrs.field(factory=trio.Event)


class PromptClient:
    """Plays the editor for one run of `conductor prompt`."""

    def __init__(self, options: PromptOptions) -> None:
        self.options = options
        self.session_id: str | None = None
        self.turn = _Turn()
        self.in_turn = False
        self.cancel_sent = False
        self.tty = sys.stderr.isatty()
        self.style = Style(self.tty and not os.environ.get("NO_COLOR"))
        self.connection: ClientConnection | None = None
        self.tool_titles: dict[str, str] = {}  # updates after the first often omit the title
        self.spinning = False

    # ------------------------------------------------------------------ output

    def out(self, text: str) -> None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`| head`): stop here, as a pipeline expects; the
            # chain sees its stdin close and shuts itself down.
            os._exit(141)

    def note(self, text: str, code: str = "2") -> None:
        """A line on stderr, kept apart from the reply text on stdout."""
        if self.turn.wrote_text and not self.options.json and sys.stdout.isatty():
            self.out("\n")
            self.turn.wrote_text = False
        print(self.style(code, text), file=sys.stderr, flush=True)

    async def spin(self) -> None:
        """A spinner on a terminal's stderr until the agent shows anything."""
        if not self.tty:
            return
        turn = self.turn
        frame = 0
        while not turn.first_update.is_set():
            sys.stderr.write(f"\r{SPINNER[frame % len(SPINNER)]} waiting for the agent…")
            sys.stderr.flush()
            self.spinning = True
            frame += 1
            with trio.move_on_after(0.1):
                await turn.first_update.wait()
        self.arrived()

    def arrived(self) -> None:
        """Something came: the spinner line goes away before anything is shown."""
        self.turn.first_update.set()
        if self.spinning:
            self.spinning = False
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

    # ---------------------------------------------------------------- handlers

    async def on_notification(self, method: str, params: Any) -> None:
        if method != "session/update" or not isinstance(params, dict):
            return
        self.arrived()
        update = params.get("update") or {}
        kind = update.get("sessionUpdate")
        if kind == "state_update" and update.get("state") == "idle":
            self.turn.stop_reason = update.get("stopReason")
            self.turn.idle.set()
        if self.options.json:
            self.out(orjson.dumps(params).decode() + "\n")
            return
        self.show(kind, update)

    def show(self, kind: Any, update: dict[str, Any]) -> None:
        """The compact, readable form of one session/update."""
        raw_content = update.get("content")
        content: dict[str, Any] = raw_content if isinstance(raw_content, dict) else {}
        if kind == "agent_message_chunk":
            if content.get("type") == "text":
                self.out(content.get("text", ""))
                self.turn.wrote_text = True
        elif kind == "agent_thought_chunk":
            self.note(f"(thinking) {content.get('text', '')}", "2;3")
        elif kind in ("tool_call", "tool_call_update"):
            call_id = str(update.get("toolCallId", ""))
            if isinstance(update.get("title"), str):
                self.tool_titles[call_id] = update["title"]
            title = self.tool_titles.get(call_id, call_id)
            status = update.get("status") or ""
            self.note(
                f"[tool] {STATUS_MARK.get(status, '')} {title} {status}".replace(
                    "  ", " "
                ).rstrip(),
                "36",
            )
        elif kind in ("plan", "plan_update"):
            entries = update.get("entries") or []
            lines = [
                f"  {STATUS_MARK.get(e.get('status', ''), '·')} {e.get('content', '')}"
                for e in entries
            ]
            self.note("[plan]\n" + "\n".join(lines), "35")

    async def on_request(self, method: str, params: Any) -> Any:
        if method == "session/request_permission":
            self.arrived()
            return {"outcome": await self.decide_permission(params or {})}
        raise RpcError({"code": METHOD_NOT_FOUND, "message": "Method not found", "data": method})

    async def decide_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        options = permission_options(params)
        title = permission_title(params) or "a tool call"
        choice = self.options.permission
        if choice == "ask" and not sys.stdin.isatty():
            self.note(f"[permission] {title}: rejected (not a terminal; use --yes to allow)", "33")
            choice = "no"
        if choice == "ask":
            if self.turn.wrote_text:
                self.out("\n")
                self.turn.wrote_text = False
            question = self.style("33", f"[permission] allow {title}? [y/N] ")
            answer = await trio.to_thread.run_sync(lambda: input(question), abandon_on_cancel=True)
            choice = "yes" if answer.strip().lower() in ("y", "yes") else "no"
        wanted = "allow" if choice == "yes" else "reject"
        for option in options:
            if str(option.get("kind", "")).startswith(wanted):
                self.note(
                    f"[permission] {title}: {option.get('name', option.get('optionId'))}", "33"
                )
                return {"outcome": "selected", "optionId": option["optionId"]}
        return {"outcome": "cancelled"}

    # ------------------------------------------------------------------ running

    async def run(self) -> int:
        if self.options.connect is not None:
            return await self.run_connected(self.options.connect)
        assert self.options.chain is not None
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
                    process_group=0,  # Ctrl-C is ours to handle, not the chain's
                    task_status=task_status,
                )
            )
            assert process.stdin is not None and process.stdout is not None
            self.connection = ClientConnection(
                process.stdin, process.stdout, self.on_request, self.on_notification
            )
            nursery.start_soon(self.connection.serve)
            nursery.start_soon(self.watch_interrupts, nursery.cancel_scope)
            try:
                status = await self.converse(self.connection)
            finally:
                await process.stdin.aclose()
            await self.connection.closed.wait()
            nursery.cancel_scope.cancel()
        return status

    async def run_connected(self, url: str) -> int:
        """Play the editor of a chain served elsewhere (`conductor serve`, or any ACP WebSocket)."""
        try:
            async with wsio.connection(url, self.options.headers) as ws:
                self.note(f"[connected to {wsio.public_url(url)}]")
                async with trio.open_nursery() as nursery:
                    connection = WebSocketClientConnection(
                        ws, self.on_request, self.on_notification
                    )
                    self.connection = connection
                    nursery.start_soon(connection.serve)
                    nursery.start_soon(self.watch_interrupts, nursery.cancel_scope)
                    status = await self.converse(connection)
                    nursery.cancel_scope.cancel()
        except wsio.ConnectError as exc:
            self.note(f"error: cannot connect to {wsio.public_url(url)}: {exc}", "31")
            return 1
        return status

    async def watch_interrupts(self, scope: trio.CancelScope) -> None:
        """Ctrl-C once: cancel the turn (session/cancel) and wait for it; twice: leave now."""
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                if self.in_turn and not self.cancel_sent and self.connection is not None:
                    self.cancel_sent = True
                    self.note("[cancelling… press Ctrl-C again to quit]", "33")
                    await self.connection.notify("session/cancel", {"sessionId": self.session_id})
                    continue
                self.note("[interrupted]", "33")
                os._exit(130)

    def initialize_params(self) -> dict[str, Any]:
        info = {"name": "conductor-prompt", "version": __version__}
        if self.options.protocol == 1:
            return {
                "protocolVersion": 1,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                },
                "clientInfo": info,
            }
        return {"protocolVersion": self.options.protocol, "info": info, "capabilities": {}}

    async def converse(self, connection: ClientConnection) -> int:
        try:
            init = await connection.request("initialize", self.initialize_params())
            self.note(f"[initialized: protocol {init.get('protocolVersion')}]")
            session = await connection.request(
                "session/new", {"cwd": self.options.cwd, "mcpServers": []}
            )
            self.session_id = session["sessionId"]
            status = 0
            for text in self.options.texts:
                status = await self.prompt(connection, text)
                if status:
                    return status
            if self.options.repl:
                status = await self.repl(connection)
            return status
        except RpcError as exc:
            self.note(f"error: {exc}: {exc.error.get('data', '')}", "31")
            return 1
        except ConnectionLost as exc:
            self.note(f"error: {exc}", "31")
            return 1

    async def repl(self, connection: ClientConnection) -> int:
        """One prompt per line from stdin until end of input."""
        status = 0
        while True:
            prompt = self.style("1", "> ") if sys.stdin.isatty() else ""
            try:
                line = await trio.to_thread.run_sync(partial(input, prompt), abandon_on_cancel=True)
            except EOFError:
                return status
            if line.strip():
                status = await self.prompt(connection, line)

    async def prompt(self, connection: ClientConnection, text: str) -> int:
        self.turn = _Turn()
        self.in_turn, self.cancel_sent = True, False
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
        error: RpcError | ConnectionLost | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.spin)
                try:
                    result = await connection.request("session/prompt", params)
                    if self.options.protocol >= 2:
                        await self.turn.idle.wait()
                except (RpcError, ConnectionLost) as exc:
                    error = exc  # raised below, not wrapped in the nursery's exception group
                finally:
                    self.turn.first_update.set()
        finally:
            self.in_turn = False
        if error is not None:
            raise error
        stop = (
            self.turn.stop_reason
            if self.options.protocol >= 2
            else (result or {}).get("stopReason")
        )
        if self.options.json:
            self.out(orjson.dumps({"stopReason": stop}).decode() + "\n")
        elif self.turn.wrote_text:
            self.out("\n")
            self.turn.wrote_text = False
        self.note(f"[stop reason: {stop}]", "1")
        return STOP_STATUS.get(str(stop), 6)


def run_prompt(options: PromptOptions) -> int:
    return trio.run(PromptClient(options).run, restrict_keyboard_interrupt_to_checkpoints=True)
