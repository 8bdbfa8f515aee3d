"""JSON-RPC messages as raw bytes plus a parsed view.

Wire fidelity demands that the conductor never re-encode what it only
re-addresses: a message's params (or result, or error) travel as the exact
bytes the sender wrote, so key order, unknown fields, number spellings and
integers beyond 64 bits arrive intact. Every message is parsed once with
orjson (which also validates it); the few members the router rewrites (`id`,
`method`, the successor envelope) are located by a small scanner that only
walks the top level of an object and skips nested values with C-speed regular
expressions.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = [
    "Message",
    "ParseError",
    "array_items",
    "error_response",
    "members",
    "parse",
]

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)")
# The usual shape of a message's head, so re-addressing it needs one match, not a scan.
_ID_HEAD = re.compile(
    rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?[0-9]+|"[^"\\]*(?:\\.[^"\\]*)*"|null)\s*[,}]'
)
_QUOTE, _OPEN_OBJ, _OPEN_ARR, _COMMA = 0x22, 0x7B, 0x5B, 0x2C

Span = tuple[int, int]


class ParseError(ValueError):
    """The bytes are not one JSON value."""


def _value_end(raw: bytes, i: int) -> int:
    """Index just past the JSON value starting at `i` (input already validated)."""
    c = raw[i]
    if c == _QUOTE:
        m = _STRING.match(raw, i)
        assert m is not None
        return m.end()
    if c in (_OPEN_OBJ, _OPEN_ARR):
        depth = 0
        for m in _TOKEN.finditer(raw, i):
            t = raw[m.start()]
            if t == _QUOTE:
                continue
            if t in (_OPEN_OBJ, _OPEN_ARR):
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return m.end()
        raise ParseError("unbalanced JSON value")
    m = _SCALAR.match(raw, i)
    assert m is not None
    return m.end()


def _closing(raw: bytes, start: int, end: int) -> int:
    """Index of the closing bracket of the container spanning raw[start:end]."""
    j = end - 1
    while raw[j] in b" \t\r\n":
        j -= 1
    return j


def members(raw: bytes, span: Span | None = None, count: int | None = None) -> dict[str, Span]:
    """Map each member name of the object at `span` to the span of its value.

    `count` is the number of distinct keys (from the parsed object). When the
    member being read is the last one, its value ends at the object's closing
    brace, so a large trailing value (params, result) is never walked.
    """
    start, end = span if span is not None else (0, len(raw))
    i = _WS.match(raw, start).end()  # type: ignore[union-attr]
    close = _closing(raw, start, end)
    i += 1  # past "{"
    out: dict[str, Span] = {}
    while True:
        i = _WS.match(raw, i).end()  # type: ignore[union-attr]
        if i >= close:
            return out
        m = _STRING.match(raw, i)
        if m is None:
            raise ParseError("object member name expected")
        key_raw = raw[i + 1 : m.end() - 1]
        key = orjson.loads(raw[i : m.end()]) if b"\\" in key_raw else key_raw.decode()
        i = _WS.match(raw, m.end()).end() + 1  # type: ignore[union-attr]  # past ":"
        i = _WS.match(raw, i).end()  # type: ignore[union-attr]
        if count is not None and len(out) == count - 1 and key not in out:
            j = close
            while raw[j - 1] in b" \t\r\n":
                j -= 1
            out[key] = (i, j)
            return out
        j = _value_end(raw, i)
        out.setdefault(key, (i, j))
        i = _WS.match(raw, j).end()  # type: ignore[union-attr]
        if i < close and raw[i] == _COMMA:
            i += 1


def array_items(raw: bytes, span: Span | None = None) -> list[Span]:
    """Spans of the elements of the JSON array at `span`."""
    start, end = span if span is not None else (0, len(raw))
    i = _WS.match(raw, start).end() + 1  # type: ignore[union-attr]
    close = _closing(raw, start, end)
    out: list[Span] = []
    while True:
        i = _WS.match(raw, i).end()  # type: ignore[union-attr]
        if i >= close:
            return out
        j = _value_end(raw, i)
        out.append((i, j))
        i = _WS.match(raw, j).end()  # type: ignore[union-attr]
        if i < close and raw[i] == _COMMA:
            i += 1


def parse(line: bytes) -> Any:
    """Parse one line; raise ParseError if it is not JSON."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ParseError(str(exc)) from None


class Message:
    """One JSON-RPC object: the bytes it arrived as, and the parsed object.

    Spans of top-level members are located lazily, once, and only when the
    message has to be re-addressed. A message born in Python (from an
    in-process plugin) has no bytes until a pipe needs them; `payload` then
    holds the exact bytes of its params, result or error when they are known.
    """

    __slots__ = ("_payload", "_raw", "_spans", "obj")

    def __init__(
        self, raw: bytes | None, obj: dict[str, Any], payload: bytes | None = None
    ) -> None:
        self._raw = raw
        self.obj = obj
        self._spans: dict[str, Span] | None = None
        self._payload = payload

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = _encode(self.obj, self._payload)
        return self._raw

    @property
    def spans(self) -> dict[str, Span]:
        if self._spans is None:
            self._spans = members(self.raw, None, len(self.obj))
        return self._spans

    def raw_member(self, key: str) -> bytes | None:
        """The exact bytes of a top-level member's value, or None if absent."""
        span = self.spans.get(key)
        return None if span is None else self.raw[span[0] : span[1]]

    def with_id(self, new_id: bytes) -> bytes:
        """The message with its id replaced: the hot path of every re-addressed message."""
        if self._spans is None:
            head = _ID_HEAD.match(self.raw)
            if head is not None:
                raw = self.raw
                return raw[: head.start(1)] + new_id + raw[head.end(1) :]
        return self.replace({"id": new_id})

    def replace(self, replacements: dict[str, bytes]) -> bytes:
        """The message with the values of existing top-level members replaced."""
        spans = self.spans
        cuts = sorted((spans[k], v) for k, v in replacements.items())
        out = []
        pos = 0
        for (start, end), value in cuts:
            out.append(self.raw[pos:start])
            out.append(value)
            pos = end
        out.append(self.raw[pos:])
        return b"".join(out)

    def inner(self, key: str) -> tuple[dict[str, Span], Any] | None:
        """Spans of the members of an object-valued member (e.g. the envelope params)."""
        value = self.obj.get(key)
        if not isinstance(value, dict):
            return None
        return members(self.raw, self.spans[key], len(value)), value


_PAYLOAD_KEYS = ("params", "result", "error")


def _encode(obj: dict[str, Any], payload: bytes | None) -> bytes:
    """Bytes for a message built in Python, splicing in its payload bytes when known."""
    if payload is None:
        return orjson.dumps(obj)
    key = next(k for k in _PAYLOAD_KEYS if k in obj)
    head = orjson.dumps({k: v for k, v in obj.items() if k != key})
    return head[:-1] + (b',"' if len(head) > 2 else b'"') + key.encode() + b'":' + payload + b"}"


def make_message(request_id: Any, method: str, params: Any) -> dict[str, Any]:
    """A request (or, with `request_id` None, a notification) as a Python object."""
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        message["id"] = request_id
    message["method"] = method
    if params is not None:
        message["params"] = params
    return message


def encode_id(value: Any) -> bytes:
    """The bytes of an id value (from a message born in Python)."""
    return orjson.dumps(value)


def raw_integer(raw: bytes) -> int | None:
    """The integer spelled by `raw`, exactly, or None if it is not an integer literal."""
    if _INTEGER.fullmatch(raw) is None:
        return None
    return int(raw)


def error_response(raw_id: bytes, code: int, message: str, data: Any = None) -> bytes:
    """A JSON-RPC error response line for the request whose id spelled `raw_id`."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"error":' + orjson.dumps(error) + b"}\n"


def request(raw_id: bytes | None, method: bytes, params: bytes | None) -> bytes:
    """A request (or notification when `raw_id` is None) line from raw parts."""
    parts = [b'{"jsonrpc":"2.0"']
    if raw_id is not None:
        parts.append(b',"id":' + raw_id)
    parts.append(b',"method":' + method)
    if params is not None:
        parts.append(b',"params":' + params)
    parts.append(b"}\n")
    return b"".join(parts)


def envelope(raw_id: bytes | None, wrapper: bytes, method: bytes, params: bytes | None) -> bytes:
    """A successor envelope (`wrapper` is the quoted method name) around one message."""
    inner = b'{"method":' + method + (b"" if params is None else b',"params":' + params) + b"}"
    return request(raw_id, wrapper, inner)
