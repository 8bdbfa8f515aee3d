"""The `--trace` file: one JSON object per logical message, in the order routed.

The router calls its observer only when tracing is on (`router.observer` is
None otherwise), so a run without `--trace` pays one attribute test per message.
The format is documented in docs/trace-format.md.
"""

from __future__ import annotations

import time
from typing import IO, Any

import orjson

__all__ = ["Tracer", "session_of"]


def session_of(params: Any) -> str | None:
    """The session a message belongs to, when its params say."""
    if type(params) is dict:
        value = params.get("sessionId")
        if isinstance(value, str):
            return value
    return None


class Tracer:
    """Appends trace events to a file, flushed once per loop pass (it is the router's
    observer)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self.batch: int | None = None  # the editor batch frame being routed, if any
        self._frames = 0
        self._loop: Any = None
        self._dirty = False

    def attach(self, loop: Any) -> None:
        """Flush at the end of each pass of `loop` that wrote events."""
        self._loop = loop

    @classmethod
    def open(cls, path: str) -> Tracer:
        return cls(open(path, "ab"))

    def new_batch(self) -> None:
        self._frames += 1
        self.batch = self._frames

    def end_batch(self) -> None:
        self.batch = None

    def message(
        self, sender: str, receiver: str, request_id: Any, method: str, params: Any
    ) -> None:
        """A request (when `request_id` is not None) or a notification."""
        protocol = "acp"
        if method == "mcp/message" and type(params) is dict:  # show the MCP operation it carries
            protocol, method = "mcp", str(params.get("method"))
        event: dict[str, Any] = {
            "type": "notification" if request_id is None else "request",
            "ts": round(time.monotonic() - self.start, 6),
            "protocol": protocol,
            "from": sender,
            "to": receiver,
            "id": request_id,
            "method": method,
            "session": session_of(params),
            "params": params,
        }
        self._write(event)

    def response(
        self,
        sender: str,
        receiver: str,
        request_id: Any,
        payload: Any,
        is_error: bool,
        session: str | None,
        protocol: str = "acp",
    ) -> None:
        event: dict[str, Any] = {
            "type": "response",
            "ts": round(time.monotonic() - self.start, 6),
            "protocol": protocol,
            "from": sender,
            "to": receiver,
            "id": request_id,
            "session": session or session_of(payload),
            "is_error": is_error,
            "payload": payload,
        }
        self._write(event)

    def _write(self, event: dict[str, Any]) -> None:
        if self.batch is not None:
            event["batch"] = self.batch
        try:
            line = orjson.dumps(event)
        except TypeError:
            event["params" if "params" in event else "payload"] = repr(
                event.get("params", event.get("payload"))
            )
            line = orjson.dumps(event)
        self.stream.write(line + b"\n")
        if not self._dirty and self._loop is not None:
            self._dirty = True
            self._loop.dirty.append(self)

    def flush(self) -> None:
        self._dirty = False
        self.stream.flush()

    def close(self) -> None:
        self.stream.close()
