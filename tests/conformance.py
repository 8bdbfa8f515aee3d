"""A small ACP conformance check (in the spirit of a protocol TCK).

`run_probes(argv, version)` runs every probe in `PROBES` against the ACP agent command `argv`,
each on a fresh process (probes never share state), and returns one short verdict string per
probe: "ok v1", "error -32601", "no answer", "exit 1", "end_turn; echoed", ...

A verdict describes what the agent did, not whether that is right: the same agent must get the
same verdicts whether it is spoken to directly or through `conductor run CHAIN`.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conftest import ROOT, Peer, init_params, prompt_params

ANSWER_TIMEOUT = 10.0  # seconds to wait for any one answer (generous: machines get loaded)
SHUTDOWN_WAIT = 3.0
BATCH_WAIT = 2.0
WORKERS = 4


class NoAnswer(Exception):
    pass


class Closed(Exception):
    pass


class Conn:
    """A fresh agent process; tolerant reading (non-JSON stdout lines are recorded, skipped)."""

    def __init__(self, argv: list[str]) -> None:
        self.peer = Peer(argv, cwd=ROOT)
        self.non_json: list[bytes] = []
        self.next_id = 100

    def send(self, message: Any) -> None:
        self.peer.send(message)

    def send_raw(self, data: bytes) -> None:
        self.peer.send_raw(data)

    def request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        self.peer.request(self.next_id, method, params)
        return self.next_id

    def notify(self, method: str, params: Any = None) -> None:
        self.peer.notify(method, params)

    def read(self, timeout: float = ANSWER_TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.peer.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise NoAnswer from None
            if line is None:
                self.peer.lines.put(None)
                raise Closed
            try:
                return json.loads(line)
            except ValueError:
                self.non_json.append(line)

    def until(self, predicate: Callable[[Any], bool]) -> tuple[list[Any], Any]:
        """Messages read until one satisfies `predicate` (the others, that one)."""
        deadline = time.monotonic() + ANSWER_TIMEOUT
        seen = []
        while True:
            message = self.read(deadline - time.monotonic())
            if predicate(message):
                return seen, message
            seen.append(message)

    def response(self, id: Any) -> tuple[list[Any], Any]:
        return self.until(lambda m: isinstance(m, dict) and "method" not in m and m.get("id") == id)

    def close(self) -> None:
        self.peer.kill()


def outcome(response: Any) -> str:
    """ "ok" or "error CODE" for one response object."""
    if not isinstance(response, dict):
        return f"odd {type(response).__name__}"
    if "error" in response:
        error = response["error"]
        return f"error {error.get('code') if isinstance(error, dict) else error!r}"
    return "ok"


def call(conn: Conn, method: str, params: Any = None) -> tuple[list[Any], Any]:
    return conn.response(conn.request(method, params))


def initialize(conn: Conn, version: int) -> None:
    _, response = call(conn, "initialize", init_params(version))
    if "result" not in response:
        raise Failed(f"initialize: {outcome(response)}")


def new_session(conn: Conn, version: int, params: Any = None) -> str:
    initialize(conn, version)
    _, response = call(conn, "session/new", params or {"cwd": "/tmp", "mcpServers": []})
    if "result" not in response:
        raise Failed(f"session/new: {outcome(response)}")
    return str(response["result"]["sessionId"])


class Failed(Exception):
    """A precondition of a probe failed; the message is the verdict."""


def updates(messages: list[Any]) -> list[dict[str, Any]]:
    return [
        m["params"]["update"]
        for m in messages
        if isinstance(m, dict) and m.get("method") == "session/update"
    ]


def turn_text(messages: list[Any]) -> str:
    return "".join(
        u["content"].get("text", "")
        for u in updates(messages)
        if u.get("sessionUpdate") == "agent_message_chunk"
    )


def turn_end(messages: list[Any], response: Any, version: int) -> str:
    """A prompt turn's ending: the stop reason (v1), or the states and response keys (v2)."""
    if "result" not in response:
        return outcome(response)
    result = response["result"]
    if version == 1:
        return str(result.get("stopReason"))
    states = [
        u["state"] + (f"({u['stopReason']})" if "stopReason" in u else "")
        for u in updates(messages)
        if u.get("sessionUpdate") == "state_update"
    ]
    return f"states {','.join(states)}; result keys {','.join(sorted(result))}"


def sentinel(conn: Conn) -> list[Any]:
    """What the agent sent before answering a harmless follow-up request (order is kept)."""
    before, _ = call(conn, "session/new", {"cwd": "/tmp", "mcpServers": []})
    return before


def replies(messages: list[Any]) -> str:
    """A summary of answers (ignoring notifications), e.g. "error -32700 id=None"."""
    out = []
    for m in messages:
        if isinstance(m, list):
            out.append("array[" + ", ".join(outcome(x) for x in m) + "]")
        elif isinstance(m, dict) and "method" not in m:
            out.append(f"{outcome(m)} id={m.get('id')!r}")
    return "; ".join(out) or "nothing"


# --- the probes: each takes a fresh connection and the agent's protocol version ---------------


def initialize_with(protocol_version: Any) -> Callable[[Conn, int], str]:
    def probe(conn: Conn, version: int) -> str:
        params = init_params(2 if protocol_version != 1 else 1)
        params["protocolVersion"] = protocol_version
        _, response = call(conn, "initialize", params)
        if "result" in response:
            return f"ok v{response['result'].get('protocolVersion')}"
        return outcome(response)

    return probe


def request_before_initialize(conn: Conn, version: int) -> str:
    _, response = call(conn, "session/new", {"cwd": "/tmp", "mcpServers": []})
    return outcome(response)


def prompt_turn(conn: Conn, version: int) -> str:
    session = new_session(conn, version)
    messages, response = call(conn, "session/prompt", prompt_params(session, "hello there"))
    echoed = "echoed" if "hello there" in turn_text(messages) else "not echoed"
    return f"{turn_end(messages, response, version)}; {echoed}"


def session_lifecycle(conn: Conn, version: int) -> str:
    """After one turn: list, then resume (v2, replay from the start; v1: session/load), then
    close; what each answers, and which updates a resume replays before its answer."""
    session = new_session(conn, version)
    messages, response = call(conn, "session/prompt", prompt_params(session, "remember me"))
    idle = any(u.get("state") == "idle" for u in updates(messages))
    if version >= 2 and "result" in response and not idle:
        conn.until(
            lambda m: (
                isinstance(m, dict)
                and m.get("method") == "session/update"
                and m["params"]["update"].get("state") == "idle"
            )
        )
    _, listed = call(conn, "session/list", {})
    found = listed.get("result", {}).get("sessions", []) if "result" in listed else []
    in_list = "listed" if any(s.get("sessionId") == session for s in found) else "not listed"
    if version >= 2:
        resume = {"sessionId": session, "cwd": "/tmp", "replayFrom": {"type": "start"}}
        replayed, resumed = call(conn, "session/resume", resume)
    else:
        replayed, resumed = call(
            conn, "session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []}
        )
    kinds = ",".join(str(u.get("sessionUpdate")) for u in updates(replayed))
    _, closed = call(conn, "session/close", {"sessionId": session})
    return (
        f"list {outcome(listed)} ({in_list}); resume {outcome(resumed)} replay [{kinds}]; "
        f"close {outcome(closed)}"
    )


def cancel_mid_turn(how: str) -> Callable[[Conn, int], str]:
    """Cancel a slow turn ("slow" makes the demo agent stream slowly) after its first chunk."""

    def probe(conn: Conn, version: int) -> str:
        session = new_session(conn, version)
        id = conn.request("session/prompt", prompt_params(session, "slow hello there"))
        seen, first = conn.until(
            lambda m: (
                m.get("id") == id
                or (
                    m.get("method") == "session/update"
                    and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
                )
            )
        )
        if first.get("id") == id:
            return f"finished before any chunk: {turn_end(seen, first, version)}"
        if how == "session":
            conn.notify("session/cancel", {"sessionId": session})
        else:
            conn.notify("$/cancel_request", {"requestId": id})
        rest, response = conn.response(id)
        return turn_end([*seen, first, *rest], response, version)

    return probe


def permission_round_trip(conn: Conn, version: int) -> str:
    session = new_session(conn, version)
    id = conn.request("session/prompt", prompt_params(session, "may I have permission to echo?"))
    before, message = conn.until(
        lambda m: m.get("id") == id or m.get("method") == "session/request_permission"
    )
    if message.get("id") == id:
        return f"not asked; {turn_end(before, message, version)}"
    options = [o.get("optionId") for o in message["params"].get("options", [])]
    if "allow" not in options:
        return f"asked with options {options}"
    selected = {"outcome": "selected", "optionId": "allow"}
    conn.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": selected}})
    rest, response = conn.response(id)
    return f"asked; {turn_end([*before, *rest], response, version)}"


def request_after_init(method: str) -> Callable[[Conn, int], str]:
    def probe(conn: Conn, version: int) -> str:
        initialize(conn, version)
        _, response = call(conn, method, {"x": 1})
        return outcome(response)

    return probe


def meta_and_unknown_fields(conn: Conn, version: int) -> str:
    params = {
        "cwd": "/tmp",
        "mcpServers": [],
        "_meta": {"vendor.example/trace": "abc"},
        "someFutureField": {"nested": [1, 2]},
    }
    new_session(conn, version, params)
    return "ok"


def after_init_send(data: bytes) -> Callable[[Conn, int], str]:
    """Send one odd line after initialize; report what comes back before a follow-up answer."""

    def probe(conn: Conn, version: int) -> str:
        initialize(conn, version)
        conn.send_raw(data)
        return replies(sentinel(conn))

    return probe


def batch_of_two(conn: Conn, version: int) -> str:
    """Two requests in one batch; what comes back (an array, separate answers, an error)."""
    initialize(conn, version)
    params = {"cwd": "/tmp", "mcpServers": []}
    batch = [
        {"jsonrpc": "2.0", "id": 51, "method": "session/new", "params": params},
        {"jsonrpc": "2.0", "id": 52, "method": "_vendor/x", "params": {}},
    ]
    conn.send(batch)
    answers: list[Any] = []
    ids: set[Any] = set()
    try:
        while not ({51, 52} <= ids or None in ids):
            message = conn.read(BATCH_WAIT)
            if isinstance(message, list) or (isinstance(message, dict) and "method" not in message):
                answers.append(message)
                items = message if isinstance(message, list) else [message]
                ids.update(m.get("id") for m in items if isinstance(m, dict))
    except NoAnswer:
        pass
    # Separate answers may come in either order (agents answer concurrently).
    answers.sort(key=lambda m: json.dumps(m.get("id")) if isinstance(m, dict) else "")
    return replies(answers)


def shutdown_on_eof(conn: Conn, version: int) -> str:
    initialize(conn, version)
    conn.peer.close_stdin()
    try:
        status = conn.peer.wait(SHUTDOWN_WAIT)
    except Exception:
        return "still running"
    return f"exits within {SHUTDOWN_WAIT:g}s (status {status})"


def stdout_is_json(conn: Conn, version: int) -> str:
    """Provoke some diagnostics (bad session, unknown method), then read stdout to its end."""
    initialize(conn, version)
    call(conn, "session/prompt", prompt_params("no-such-session", "hi"))
    call(conn, "_vendor/x", {})
    conn.peer.close_stdin()
    try:
        while True:
            conn.read()
    except Closed:
        pass
    return f"{len(conn.non_json)} non-JSON stdout lines"


PROBES: dict[str, Callable[[Conn, int], str]] = {
    "initialize v1": initialize_with(1),
    "initialize v2": initialize_with(2),
    "initialize 99": initialize_with(99),
    "initialize 0": initialize_with(0),
    'initialize "1"': initialize_with("1"),
    "request before initialize": request_before_initialize,
    "prompt turn": prompt_turn,
    "session lifecycle": session_lifecycle,
    "session/cancel mid-turn": cancel_mid_turn("session"),
    "$/cancel_request mid-turn": cancel_mid_turn("request"),
    "permission round trip": permission_round_trip,
    "_vendor/x request": request_after_init("_vendor/x"),
    "vendor/x request": request_after_init("vendor/x"),
    "_meta and unknown fields": meta_and_unknown_fields,
    "malformed JSON": after_init_send(b'{"jsonrpc": "2.0", "id": 9, '),
    "invalid request": after_init_send(b'{"jsonrpc":"2.0","id":1}'),
    "batch of two": batch_of_two,
    "shutdown on stdin EOF": shutdown_on_eof,
    "stdout is JSON": stdout_is_json,
}


def run_probe(argv: list[str], version: int, name: str) -> str:
    conn = Conn(argv)
    try:
        verdict = PROBES[name](conn, version)
    except Failed as failed:
        verdict = str(failed)
    except NoAnswer:
        verdict = "no answer"
    except Closed:
        try:
            verdict = f"exit {conn.peer.wait(ANSWER_TIMEOUT)}"
        except Exception:
            verdict = "stdout closed"
    finally:
        conn.close()
    if conn.non_json and name != "stdout is JSON":
        verdict += f" (+{len(conn.non_json)} non-JSON stdout lines)"
    return verdict


def run_probes(argv: list[str], version: int, names: list[str] | None = None) -> dict[str, str]:
    """Run each probe on its own fresh `argv` process; return {probe name: verdict}."""
    names = list(PROBES) if names is None else names
    with ThreadPoolExecutor(WORKERS) as pool:
        verdicts = list(pool.map(lambda n: run_probe(argv, version, n), names))
    return dict(zip(names, verdicts, strict=True))
