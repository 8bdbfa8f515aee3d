"""Deterministic ACP demo agent: echoes each prompt back as streamed `session/update` chunks.

It is the agent of the example chains and the "minimal agent" of the benchmarks, so the
per-message path stays lean: one read, one orjson parse, one `os.write` per emitted message,
and no threads on POSIX. It speaks ACP v1 and draft v2, selected by `initialize`. Stdout
carries only newline-delimited JSON-RPC 2.0; diagnostics go to stderr.

Run it with `python -m conductor.demo_agent [--chunks N] [--delay S] [--record FILE] [--name N]`.
"""

from __future__ import annotations

import argparse
import os
import queue
import selectors
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

import orjson

from conductor import __version__
from conductor.demo_mcp import McpError, StdioMcpClient, call_tool

from .protocol import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
)

JsonObj = dict[str, Any]
RequestId = int | str | None
RequestHandler = Callable[[RequestId, Any], JsonObj | None]
NotificationHandler = Callable[[Any], None]

DEFAULT_NAME = "conductor-demo-agent"
SUPPORTED_VERSIONS = [1, 2]
SLOW_DELAY = 0.2
TOOL_POLL = 0.02  # how often the loop looks for a finished tool call while one runs
TOOL_PREFIX = "use tool "

RESOURCE_NOT_FOUND = -32002

PERMISSION_OPTIONS = [
    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject once", "kind": "reject_once"},
]


class RpcError(Exception):
    """A JSON-RPC error a handler raises so dispatch can answer the request with it."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class Output:
    """Writes each message with one `os.write`, so a peer never sees partial or mixed lines."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def send(self, msg: JsonObj) -> None:
        data = orjson.dumps(msg, option=orjson.OPT_APPEND_NEWLINE)
        written = os.write(self._fd, data)
        while written < len(data):  # only for huge messages on a full pipe
            written += os.write(self._fd, data[written:])


class LineReader(Protocol):
    """Source of stdin lines that can wait with a timeout, so streaming can be interrupted."""

    def read(self, timeout: float | None) -> list[bytes] | None:
        """Complete lines (without `\\n`), `[]` on timeout, `None` once stdin is exhausted."""
        ...


class SelectLineReader:
    """POSIX reader: `select` + `os.read` in the main thread, no thread hand-off per message."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._parts: list[bytes] = []
        self._eof = False
        # select() (not epoll/poll) because it also works on regular files and macOS ttys.
        self._selector = selectors.SelectSelector()
        self._selector.register(fd, selectors.EVENT_READ)

    def read(self, timeout: float | None) -> list[bytes] | None:
        if self._eof:
            return None
        # With no deadline pending, a plain blocking read saves a syscall per message.
        if timeout is not None and not self._selector.select(timeout):
            return []
        data = os.read(self._fd, 65536)
        if not data:
            self._eof = True
            tail = b"".join(self._parts)
            return [tail] if tail else None
        if b"\n" not in data:
            self._parts.append(data)  # joined once, so multi-megabyte lines stay linear
            return []
        lines = data.split(b"\n")
        if self._parts:
            self._parts.append(lines[0])
            lines[0] = b"".join(self._parts)
        tail = lines.pop()
        self._parts = [tail] if tail else []
        return lines


class ThreadLineReader:
    """Fallback where `select` cannot wait on pipes (Windows): a reader thread feeds a queue."""

    def __init__(self, stream: BinaryIO) -> None:
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._eof = False
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: BinaryIO) -> None:
        for line in stream:
            self._queue.put(line[:-1] if line.endswith(b"\n") else line)
        self._queue.put(None)

    def read(self, timeout: float | None) -> list[bytes] | None:
        if self._eof:
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return []
        lines: list[bytes] = []
        while item is not None:
            lines.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return lines
        self._eof = True
        return lines or None


@dataclass
class Session:
    """One conversation; v2 keeps whole-message history so `session/resume` can replay it."""

    session_id: str
    cwd: str
    active: bool = True
    history: list[JsonObj] = field(default_factory=list)
    mcp_servers: list[JsonObj] = field(default_factory=list)  # stdio declarations
    mcp_clients: list[StdioMcpClient] | None = None  # started on the first tool use


@dataclass
class Turn:
    """An in-flight `session/prompt`: streamed one step at a time so cancels can interrupt it."""

    session: Session
    request_id: RequestId
    text: str
    delay: float
    user_message_id: str = ""
    agent_message_id: str = ""
    chunks: list[str] = field(default_factory=list)
    sent: int = 0
    due: float = 0.0
    tool_call_id: str = ""
    permission_id: int | None = None
    tool_running: bool = False  # waiting for an MCP tool call (on a worker thread)


def prompt_text(blocks: list[Any]) -> str:
    """The user's words: text content blocks only, other block types are ignored."""
    texts = [
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts)


def split_text(text: str, count: int) -> list[str]:
    """At most `count` non-empty pieces whose concatenation is `text`."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def same_id(a: Any, b: Any) -> bool:
    """JSON-RPC ids match only with the same type: 1 and "1" are different requests."""
    return type(a) is type(b) and a == b


def object_params(params: Any) -> JsonObj:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: expected an object")
    return params


def text_block(text: str) -> JsonObj:
    return {"type": "text", "text": text}


class DemoAgent:
    """Protocol logic: dispatches decoded messages and drives prompt turns."""

    def __init__(self, out: Output, chunks: int, delay: float, name: str) -> None:
        self.out = out
        self.chunk_count = chunks
        self.delay = delay
        self.name = name
        self.version: int | None = None
        self.sessions: dict[str, Session] = {}
        self.turns: dict[str, Turn] = {}  # by session id: one foreground prompt per session
        self.permissions: dict[int, Turn] = {}  # by the id of our session/request_permission
        self.tool_results: queue.Queue[tuple[Turn, str, bool]] = queue.Queue()
        self.counter = 0  # message and tool call ids
        self.next_request_id = 0
        self.requests: dict[str, RequestHandler] = {
            "initialize": self.initialize,
            "_demo/echo": self.echo,
        }
        self.notifications: dict[str, NotificationHandler] = {
            "session/cancel": self.cancel_session,
            "$/cancel_request": self.cancel_request,
        }

    # -- wire helpers -------------------------------------------------------------------------

    def send_result(self, req_id: RequestId, result: JsonObj) -> None:
        self.out.send({"jsonrpc": "2.0", "id": req_id, "result": result})

    def send_error(self, req_id: RequestId, code: int, message: str, data: Any = None) -> None:
        error: JsonObj = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.out.send({"jsonrpc": "2.0", "id": req_id, "error": error})

    def send_update(self, session_id: str, update: JsonObj) -> None:
        params = {"sessionId": session_id, "update": update}
        self.out.send({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    # -- dispatch -----------------------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        if not line or line.isspace():
            return
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self.send_error(None, PARSE_ERROR, "Parse error", str(exc))
            return
        if isinstance(msg, dict):
            self.dispatch(msg)
        elif isinstance(msg, list) and msg:
            # Batch entries are handled one by one; replies go out individually.
            for item in msg:
                if isinstance(item, dict):
                    self.dispatch(item)
                else:
                    self.send_error(None, INVALID_REQUEST, "Invalid request")
        else:
            self.send_error(None, INVALID_REQUEST, "Invalid request")

    def dispatch(self, msg: JsonObj) -> None:
        method = msg.get("method")
        if not isinstance(method, str):
            if method is None and ("result" in msg or "error" in msg):
                self.on_response(msg)
            else:
                self.send_error(msg.get("id"), INVALID_REQUEST, "Invalid request")
            return
        params = msg.get("params")
        if "id" not in msg:
            notification = self.notifications.get(method)
            if notification is not None:
                try:
                    notification(params)
                except RpcError as err:
                    log(f"ignored {method} notification: {err.message}")
            return
        req_id = msg["id"]
        handler = self.requests.get(method)
        try:
            if handler is None:
                raise self.unknown_method(method)
            result = handler(req_id, params)
        except RpcError as err:
            self.send_error(req_id, err.code, err.message, err.data)
            return
        if result is not None:  # None: the handler answers later (prompt turns)
            self.send_result(req_id, result)

    def unknown_method(self, method: str) -> RpcError:
        if self.version is None and method.startswith("session/"):
            return RpcError(INVALID_REQUEST, "Connection not initialized", method)
        return RpcError(METHOD_NOT_FOUND, f"Method not found: {method}", method)

    def on_response(self, msg: JsonObj) -> None:
        """Answers to our permission requests; anything else is unexpected but harmless."""
        rid = msg.get("id")
        turn = self.permissions.pop(rid, None) if type(rid) is int else None
        if turn is None:
            log(f"ignored response to unknown request id {rid!r}")
            return
        turn.permission_id = None
        if "error" in msg:
            error = msg["error"]
            code = error.get("code") if isinstance(error, dict) else None
            self.permission_decided(turn, None if code == REQUEST_CANCELLED else False)
            return
        result = msg.get("result")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            self.permission_decided(turn, None)  # cancelled (or unintelligible)
        else:
            self.permission_decided(turn, outcome.get("optionId") == "allow")

    # -- initialization and sessions ----------------------------------------------------------

    def initialize(self, req_id: RequestId, params: Any) -> JsonObj:
        if self.version is not None:
            raise RpcError(INVALID_REQUEST, "Already initialized")
        requested = params.get("protocolVersion") if isinstance(params, dict) else None
        if type(requested) is not int or requested < 1:
            data = {"requested": requested, "supported": SUPPORTED_VERSIONS}
            raise RpcError(INVALID_PARAMS, "Unsupported protocol version", data)
        self.version = 1 if requested == 1 else 2
        self.requests["session/new"] = self.new_session
        self.requests["session/prompt"] = self.prompt
        info = {"name": self.name, "version": __version__}
        if self.version == 1:
            return {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": False,
                    "promptCapabilities": {
                        "image": False,
                        "audio": False,
                        "embeddedContext": False,
                    },
                    "mcpCapabilities": {"http": False, "sse": False},
                },
                "authMethods": [],
                "agentInfo": info,
            }
        # Advertising `session` obliges the v2 baseline: list, resume and close as well.
        self.requests["session/list"] = self.list_sessions
        self.requests["session/resume"] = self.resume_session
        self.requests["session/close"] = self.close_session
        return {
            "protocolVersion": 2,
            "info": info,
            "capabilities": {"session": {}},
            "authMethods": [],
        }

    def echo(self, req_id: RequestId, params: Any) -> JsonObj:
        return {"params": params}

    def new_session(self, req_id: RequestId, params: Any) -> JsonObj:
        p = object_params(params)
        cwd = p.get("cwd")
        session_id = f"sess-{len(self.sessions) + 1}"
        session = Session(session_id, cwd if isinstance(cwd, str) else "/")
        servers = p.get("mcpServers")
        session.mcp_servers = [
            s for s in servers or [] if isinstance(s, dict) and isinstance(s.get("command"), str)
        ]
        self.sessions[session_id] = session
        return {"sessionId": session_id}

    def find_session(self, session_id: Any) -> Session:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or not session.active:
            raise RpcError(RESOURCE_NOT_FOUND, "Session not found", {"sessionId": session_id})
        return session

    def list_sessions(self, req_id: RequestId, params: Any) -> JsonObj:
        cwd = params.get("cwd") if isinstance(params, dict) else None
        sessions = [
            {"sessionId": s.session_id, "cwd": s.cwd}
            for s in self.sessions.values()
            if cwd is None or s.cwd == cwd
        ]
        return {"sessions": sessions}

    def resume_session(self, req_id: RequestId, params: Any) -> JsonObj:
        p = object_params(params)
        session_id = p.get("sessionId")
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, "Session not found", {"sessionId": session_id})
        replay = p.get("replayFrom")
        if replay is not None and not (isinstance(replay, dict) and replay.get("type") == "start"):
            raise RpcError(INVALID_PARAMS, "Unsupported replayFrom cursor", {"replayFrom": replay})
        session.active = True
        if replay is not None:  # replayed updates must precede the resume response
            for update in session.history:
                self.send_update(session.session_id, update)
        return {}

    def close_session(self, req_id: RequestId, params: Any) -> JsonObj:
        session_id = object_params(params).get("sessionId")
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is not None:
            turn = self.turns.get(session.session_id)
            if turn is not None:  # final idle update and prompt answer precede the close answer
                self.finish(turn, "cancelled")
            session.active = False
        return {}

    # -- prompt turns -------------------------------------------------------------------------

    def prompt(self, req_id: RequestId, params: Any) -> None:
        p = object_params(params)
        session = self.find_session(p.get("sessionId"))
        blocks = p.get("prompt")
        if not isinstance(blocks, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: prompt must be an array")
        if session.session_id in self.turns:
            raise RpcError(INVALID_REQUEST, "Session already has a prompt in progress")
        text = prompt_text(blocks)
        if text.strip() == "crash":
            crash()
        lowered = text.lower()
        delay = SLOW_DELAY if "slow" in lowered else self.delay
        turn = Turn(session, req_id, text, delay)
        self.turns[session.session_id] = turn
        if self.version == 2:
            turn.user_message_id = self.new_id("msg")
            user_message = {
                "sessionUpdate": "user_message",
                "messageId": turn.user_message_id,
                "content": blocks,
            }
            session.history.append(user_message)
            self.send_update(session.session_id, user_message)
            self.send_state(turn, "running")
        if "think" in lowered:
            thought: JsonObj = {
                "sessionUpdate": "agent_thought_chunk",
                "content": text_block("Thinking it over."),
            }
            if self.version == 2:
                thought["messageId"] = self.new_id("msg")
            self.send_update(session.session_id, thought)
        if text.startswith(TOOL_PREFIX):
            self.use_tool(turn, text[len(TOOL_PREFIX) :])
        elif "permission" in lowered:
            self.ask_permission(turn)
        else:
            self.start_reply(turn, "")

    def send_state(self, turn: Turn, state: str, stop_reason: str | None = None) -> None:
        update: JsonObj = {"sessionUpdate": "state_update", "state": state}
        if stop_reason is not None:
            update["stopReason"] = stop_reason
        self.send_update(turn.session.session_id, update)

    def ask_permission(self, turn: Turn) -> None:
        turn.tool_call_id = self.new_id("call")
        tool_call = {
            "toolCallId": turn.tool_call_id,
            "title": "Demo tool",
            "kind": "execute",
            "status": "pending",
        }
        session_id = turn.session.session_id
        params: JsonObj
        if self.version == 1:
            self.send_update(session_id, {"sessionUpdate": "tool_call", **tool_call})
            params = {"sessionId": session_id, "toolCall": tool_call}
        else:
            self.send_update(session_id, {"sessionUpdate": "tool_call_update", **tool_call})
            self.send_state(turn, "requires_action")
            subject = {"type": "tool_call", "toolCall": tool_call}
            params = {"sessionId": session_id, "title": "Run Demo tool?", "subject": subject}
        params["options"] = PERMISSION_OPTIONS
        self.next_request_id += 1
        turn.permission_id = self.next_request_id
        self.permissions[turn.permission_id] = turn
        self.out.send(
            {
                "jsonrpc": "2.0",
                "id": turn.permission_id,
                "method": "session/request_permission",
                "params": params,
            }
        )

    def permission_decided(self, turn: Turn, granted: bool | None) -> None:
        """Continue a turn after the client's answer; `None` means the client cancelled."""
        if granted is None:
            self.finish(turn, "cancelled")
            return
        if self.version == 2:
            self.send_state(turn, "running")
        update = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": turn.tool_call_id,
            "status": "completed" if granted else "failed",
        }
        self.send_update(turn.session.session_id, update)
        self.start_reply(turn, "Permission granted. " if granted else "Permission denied. ")

    # -- MCP tools ----------------------------------------------------------------------------

    def use_tool(self, turn: Turn, request: str) -> None:
        """`use tool NAME {json arguments}`: call it through our MCP client, then reply."""
        name, _, raw_arguments = request.strip().partition(" ")
        try:
            arguments = orjson.loads(raw_arguments) if raw_arguments.strip() else {}
        except orjson.JSONDecodeError:
            arguments = None
        if not name or not isinstance(arguments, dict):
            self.start_reply(turn, "", 'Say: use tool NAME {"json": "arguments"}.')
            return
        turn.tool_call_id = self.new_id("call")
        tool_call = {
            "toolCallId": turn.tool_call_id,
            "title": f"MCP tool {name}",
            "kind": "other",
            "status": "in_progress",
            "rawInput": arguments,
        }
        kind = "tool_call" if self.version == 1 else "tool_call_update"
        self.send_update(turn.session.session_id, {"sessionUpdate": kind, **tool_call})
        turn.tool_running = True
        worker = threading.Thread(
            target=self._tool_worker, args=(turn, name, arguments), daemon=True
        )
        worker.start()

    def _tool_worker(self, turn: Turn, name: str, arguments: JsonObj) -> None:
        session = turn.session
        try:
            if session.mcp_clients is None:
                session.mcp_clients = [StdioMcpClient(s) for s in session.mcp_servers]
            text, failed = call_tool(session.mcp_clients, name, arguments)
        except McpError as exc:
            text, failed = str(exc), True
        self.tool_results.put((turn, text, failed))

    def tool_finished(self, turn: Turn, text: str, failed: bool) -> None:
        turn.tool_running = False
        if self.turns.get(turn.session.session_id) is not turn:
            return  # cancelled meanwhile
        update = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": turn.tool_call_id,
            "status": "failed" if failed else "completed",
            "content": [{"type": "content", "content": text_block(text)}],
        }
        self.send_update(turn.session.session_id, update)
        verdict = "failed" if failed else "answered"
        self.start_reply(turn, "", f"The tool {verdict}: {text}")

    def close_mcp_clients(self) -> None:
        for session in self.sessions.values():
            for client in session.mcp_clients or []:
                client.close()

    def start_reply(self, turn: Turn, prefix: str, text: str | None = None) -> None:
        if self.version == 2:
            turn.agent_message_id = self.new_id("msg")
        reply = f"You said: {turn.text}" if text is None else text
        turn.chunks = split_text(f"{prefix}{reply}", self.chunk_count)
        turn.due = time.monotonic()
        self.advance(turn, turn.due)

    def advance(self, turn: Turn, now: float) -> None:
        """Send every chunk that is due; with no delay that is the whole reply at once."""
        while turn.sent < len(turn.chunks) and now >= turn.due:
            update: JsonObj = {"sessionUpdate": "agent_message_chunk"}
            if self.version == 2:  # required in v2: chunks append to that message
                update["messageId"] = turn.agent_message_id
            update["content"] = text_block(turn.chunks[turn.sent])
            self.send_update(turn.session.session_id, update)
            turn.sent += 1
            turn.due = now + turn.delay
        if turn.sent == len(turn.chunks):
            self.finish(turn, "end_turn")

    def advance_all(self) -> None:
        while not self.tool_results.empty():
            self.tool_finished(*self.tool_results.get_nowait())
        if not self.turns:
            return
        now = time.monotonic()
        for turn in list(self.turns.values()):
            if turn.permission_id is None and not turn.tool_running:
                self.advance(turn, now)

    def next_timeout(self) -> float | None:
        """Seconds until the next chunk is due, or None when nothing is streaming."""
        if not self.turns:
            return None
        if any(t.tool_running for t in self.turns.values()):
            return TOOL_POLL
        dues = [t.due for t in self.turns.values() if t.permission_id is None]
        return max(0.0, min(dues) - time.monotonic()) if dues else None

    def finish(self, turn: Turn, stop_reason: str, request_cancelled: bool = False) -> None:
        """End a turn: the v2 idle update first, then the answer to the prompt request."""
        session_id = turn.session.session_id
        del self.turns[session_id]
        if turn.permission_id is not None:
            # Withdraw our pending permission request so it cannot keep anything waiting.
            self.permissions.pop(turn.permission_id, None)
            cancel = {"requestId": turn.permission_id}
            self.out.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": cancel})
            turn.permission_id = None
            if self.version == 2:
                update = {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": turn.tool_call_id,
                    "status": "cancelled",
                }
                self.send_update(session_id, update)
        result: JsonObj = {"stopReason": stop_reason}
        if self.version == 2:
            if turn.sent:
                text = "".join(turn.chunks[: turn.sent])
                turn.session.history.append(
                    {
                        "sessionUpdate": "agent_message",
                        "messageId": turn.agent_message_id,
                        "content": [text_block(text)],
                    }
                )
            self.send_state(turn, "idle", stop_reason)
            result = {"messageId": turn.user_message_id}
        if request_cancelled:
            self.send_error(turn.request_id, REQUEST_CANCELLED, "Request cancelled")
        else:
            self.send_result(turn.request_id, result)

    def cancel_session(self, params: Any) -> None:
        session_id = object_params(params).get("sessionId")
        turn = self.turns.get(session_id) if isinstance(session_id, str) else None
        if turn is not None:
            self.finish(turn, "cancelled")

    def cancel_request(self, params: Any) -> None:
        request_id = object_params(params).get("requestId")
        for turn in self.turns.values():
            if same_id(turn.request_id, request_id):
                self.finish(turn, "cancelled", request_cancelled=True)
                return

    def shutdown(self) -> None:
        """Stdin closed: finish streaming turns at once, abandon those awaiting permission."""
        for turn in list(self.turns.values()):
            if turn.permission_id is not None or turn.tool_running:
                self.finish(turn, "cancelled")
            else:
                turn.delay = 0.0
                turn.due = 0.0
                self.advance(turn, time.monotonic())


def log(message: str) -> None:
    sys.stderr.write(f"{DEFAULT_NAME}: {message}\n")
    sys.stderr.flush()


def crash() -> None:
    """The failure tests' hook: die abruptly, without answering anything."""
    log("crashing on request (prompt was 'crash'), exit status 3")
    os._exit(3)


def serve(agent: DemoAgent, reader: LineReader, record_fd: int | None) -> None:
    while True:
        lines = reader.read(agent.next_timeout())
        if lines is None:
            break
        for line in lines:
            if record_fd is not None:
                os.write(record_fd, line + b"\n")
            agent.handle_line(line)
        agent.advance_all()
    agent.shutdown()
    agent.close_mcp_clients()


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise argparse.ArgumentTypeError("must be a number >= 0")
    return number


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m conductor.demo_agent",
        description="Deterministic ACP demo agent (v1 and v2) that echoes prompts back.",
    )
    parser.add_argument(
        "--chunks", type=positive_int, default=4, help="chunks per reply (default 4)"
    )
    parser.add_argument(
        "--delay", type=non_negative_float, default=0.0, help="seconds between chunks"
    )
    parser.add_argument("--record", metavar="FILE", help="append every raw stdin line to FILE")
    parser.add_argument("--name", default=DEFAULT_NAME, help="name reported by initialize")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record_fd = None
    if args.record:
        record_fd = os.open(args.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    reader: LineReader
    if os.name == "posix":
        reader = SelectLineReader(sys.stdin.fileno())
    else:
        reader = ThreadLineReader(sys.stdin.buffer)
    agent = DemoAgent(Output(sys.stdout.fileno()), args.chunks, args.delay, args.name)
    try:
        serve(agent, reader, record_fd)
    except BrokenPipeError:
        pass  # the client stopped reading: nothing left to do
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
