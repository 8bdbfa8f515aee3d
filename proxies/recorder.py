"""recorder: writes each session's traffic to its own JSON Lines file, changing nothing.

Every request, notification and response that passes the proxy is appended, as it passes,
to `FOLDER/<session id>.jsonl`; traffic that belongs to no session (`initialize`,
`authenticate`, `session/list`, extension methods without a `sessionId`...) goes to
`FOLDER/connection.jsonl`. Each line is one JSON object:

    {"ts": "2025-01-31T12:00:00.123456+00:00", "direction": "editor->agent",
     "type": "request", "method": "session/prompt", "id": 3, "params": {...}}

`direction` is "editor->agent" or "agent->editor"; `type` is "request", "notification" or
"response"; a response repeats its request's `method` and `id` and carries `result` or
`error` instead of `params`; a notification has `"id": null`. Ids are those of the hop the
message arrived on (each hop numbers its own requests). A message's session is its
`params.sessionId`; `session/new` and its response are written to the new session's file
once the response names it, and a response that names another session than its request
(`session/fork`) is copied, with its request, to that session's file too.

    [[proxy]]
    plugin = "proxies.recorder:RecorderProxy"     # or the installed name "recorder"
    options = { folder = "acp-sessions" }

Standalone: `conductor proxy proxies.recorder:RecorderProxy -o folder=acp-sessions`.

Options:

- `folder` (path, default "acp-sessions"): where the files go; created when the first line is
  written. A relative path is taken from the current directory of the process running the
  proxy (the conductor's, for an in-process plugin). Files are appended to, never truncated.

File names are the session id when it is made of letters, digits, `.`, `_` and `-` only;
otherwise (or when it could clash with `connection.jsonl` or a reserved device name) unsafe
characters become `_`, the name is shortened to 80 characters and a hash of the real id is
appended, so distinct ids never share a file. Each line is flushed as it is written, so a
crash of the conductor loses nothing already seen. Where a proxy sits in the chain decides
what it sees: put it nearest the editor to record what the editor sent and got.

Limits: `$/cancel_request` notifications are handled by the conductor and not recorded (the
cancelled request's error response is). A failed write is logged (logger
`conductor.proxies.recorder`) and the traffic goes on. Two limits of the plugin host today
apply to any proxy that sees every message: what it passes on is encoded again from the parsed
message (number spellings change, integers beyond 64 bits lose precision), and a response it
awaited can be overtaken by a message sent right behind it from the same side.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from conductor.plugin import Call

log = logging.getLogger("conductor.proxies.recorder")

CONNECTION = "connection"  # the file of traffic without a session
MAX_OPEN_FILES = 64
UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
RESERVED = {CONNECTION, "con", "prn", "aux", "nul"} | {
    f"{device}{n}" for device in ("com", "lpt") for n in range(10)
}


def file_name(session_id: str) -> str:
    """A file name for a session id that is safe on common file systems and unique to it."""
    safe = UNSAFE.sub("_", session_id)[:80].lstrip(".")
    if not safe or safe != session_id or safe.lower() in RESERVED:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe = f"{safe or 'session'}-{digest}"
    return safe + ".jsonl"


def encode(entry: dict[str, Any]) -> bytes:
    """One JSON line; values orjson cannot encode (huge integers) fall back to `json`."""
    try:
        return orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(entry, ensure_ascii=False, default=repr) + "\n").encode()


def entry(
    direction: str, kind: str, method: str, request_id: Any, key: str, value: Any
) -> dict[str, Any]:
    return {
        "ts": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
        "direction": direction,
        "type": kind,
        "method": method,
        "id": request_id,
        key: value,
    }


class RecorderProxy:
    def __init__(self, folder: str = "acp-sessions") -> None:
        if not isinstance(folder, str) or not folder:
            raise TypeError("'folder' must be a path")
        self.folder = Path(folder).expanduser()
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"'folder' {folder!r} exists and is not a folder")
        self._files: dict[str, BinaryIO] = {}  # open files by name, oldest first
        self._failed: set[str] = set()  # names whose write failure was already logged

    async def on_message(self, call: Call) -> None:
        """Every request and notification, both ways (there is no other hook)."""
        session_id = call.session_id
        here = f"{call.source}->{call.destination}"
        kind = "request" if call.is_request else "notification"
        line = encode(entry(here, kind, call.method, call.id, "params", call.params))
        if not call.is_request:
            self.write(session_id, line)
            return  # returning passes the notification on
        opens_session = session_id is None and call.method == "session/new"
        if not opens_session:
            self.write(session_id, line)
        reply = await call.forward()
        assert reply is not None
        back = f"{call.destination}->{call.source}"
        key, value = ("error", reply.error) if reply.error is not None else ("result", reply.result)
        answer = encode(entry(back, "response", call.method, call.id, key, value))
        named = reply.result.get("sessionId") if isinstance(reply.result, dict) else None
        if isinstance(named, str) and named != session_id:  # session/new, session/fork
            self.write(named, line + answer)
            if opens_session:
                return
        elif opens_session:  # failed: it stays with the connection's traffic
            self.write(None, line)
        self.write(session_id, answer)
        if call.method == "session/close" and session_id is not None:
            self.close(file_name(session_id))

    def write(self, session_id: str | None, data: bytes) -> None:
        name = CONNECTION + ".jsonl" if session_id is None else file_name(session_id)
        try:
            file = self._files.get(name)
            if file is None:
                if len(self._files) >= MAX_OPEN_FILES:
                    self.close(next(iter(self._files)))
                self.folder.mkdir(parents=True, exist_ok=True)
                file = self._files[name] = open(self.folder / name, "ab")  # noqa: SIM115
            file.write(data)
            file.flush()
        except OSError as exc:
            if name not in self._failed:
                self._failed.add(name)
                log.error("recorder cannot write %s: %s", self.folder / name, exc)

    def close(self, name: str) -> None:
        file = self._files.pop(name, None)
        if file is not None:
            file.close()
