"""JSON-RPC messages as raw bytes plus a parsed view, and encoding that keeps spellings.

Wire fidelity demands that the conductor never re-encode what it only
re-addresses: a message's params (or result, or error) travel as the exact
bytes the sender wrote, so key order, unknown fields, number spellings and
integers beyond 64 bits arrive intact. Every message is parsed once with
orjson (which also validates it). A valid message orjson cannot represent (a
number beyond double range, a lone surrogate escape) is parsed exactly by the
standard library instead, so it is never dropped. The few members the router
rewrites (`id`, `method`, the successor envelope) are located by matching the
usual head of a message with one regular expression, or by a small scanner
that walks only the top level of an object. When a hook changes a message,
`encode_preserving` re-encodes only what changed and copies the original bytes
of everything else.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = [
    "Message",
    "ParseError",
    "array_items",
    "dumps",
    "encode_preserving",
    "envelope",
    "error_response",
    "members",
    "parse",
    "request",
]

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]*)")
_STR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
# The usual head of a message: jsonrpc, then id and/or method, then its payload member.
_HEAD = re.compile(
    rb'\{\s*"jsonrpc"\s*:\s*("2\.0")\s*'
    rb'(?:,\s*"id"\s*:\s*(-?[0-9]+|' + _STR + rb"|null)\s*)?"
    rb'(?:,\s*"method"\s*:\s*(' + _STR + rb")\s*)?"
    rb'(?:,\s*"(params|result|error)"\s*:\s*)?',
    re.S,
)
_ID, _METHOD, _PAYLOAD = 2, 3, 4
_COMPACT_ID = b'{"jsonrpc":"2.0","id":'
_COMPACT_ID_LEN = len(_COMPACT_ID)
_DIGITS = frozenset(b"-0123456789")
_COMPACT_ENVELOPE = re.compile(
    rb'\{"jsonrpc":"2\.0",("id":(?:-?[0-9]+|'
    + _STR
    + rb'),)?"method":'
    + _STR
    + rb',"params":\{"method":('
    + _STR
    + rb')(,"params":)?',
    re.S,
)
COMPACT_NOTIFICATION = b'{"jsonrpc":"2.0","method":'


def wrap_notification(msg: Message, wrapper: bytes) -> bytes | None:
    """A compact notification wrapped in a successor envelope by joining bytes around its
    own (`{"jsonrpc":"2.0","method":..,"params":..}` in that order), or None."""
    raw, obj = msg.raw, msg.obj
    if raw.startswith(COMPACT_NOTIFICATION) and len(obj) == (3 if "params" in obj else 2):
        return COMPACT_NOTIFICATION + wrapper + b',"params":{' + raw[17:].rstrip() + b"}"
    return None


_ID_HEAD = re.compile(
    rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?[0-9]+|' + _STR + rb"|null)\s*[,}]", re.S
)
# The usual head of a successor envelope's params: the wrapped method, then its params.
_INNER_HEAD = re.compile(rb'\{\s*"method"\s*:\s*(' + _STR + rb')\s*(,\s*"params"\s*:\s*)?', re.S)
_QUOTE, _OPEN_OBJ, _OPEN_ARR, _COMMA = 0x22, 0x7B, 0x5B, 0x2C
_BLANK = b" \t\r\n"

Span = tuple[int, int]


class ParseError(ValueError):
    """The bytes are not one JSON value."""


# ---------------------------------------------------------------------------- parsing


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(line: bytes) -> Any:
    """Parse one line; raise ParseError if it is not JSON (RFC 8259).

    orjson first; what it refuses although it is valid JSON (numbers beyond
    double range, lone surrogate escapes) is parsed exactly by `json`.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        first = str(exc)
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise ParseError(first) from None


def dumps(value: Any) -> bytes:
    """Compact JSON for a value, including what orjson cannot encode (integers beyond 64
    bits, lone surrogates) when it came from the exact parser."""
    try:
        return orjson.dumps(value)
    except TypeError:
        try:
            return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False).encode()
        except ValueError as exc:
            raise TypeError(str(exc)) from None


def _finite(value: Any) -> Any:
    """Non-finite floats (`1e400` parsed exactly) become null, as orjson encodes them."""
    if type(value) is float:
        return value if value - value == 0 else None
    if type(value) is dict:
        return {k: _finite(v) for k, v in value.items()}
    if type(value) is list:
        return [_finite(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    """Whether two parsed values are the same JSON value (1, 1.0, true and -0.0 all differ)."""
    try:
        return dumps(a) == dumps(b)
    except TypeError:
        return _same(a, b)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(map(_same, a, b))
    if type(a) is float:
        return repr(a) == repr(b)
    return bool(a == b)


# ---------------------------------------------------------------------------- scanning


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


def _closing(raw: bytes, end: int) -> int:
    """Index of the last non-blank byte before `end` (a container's closing bracket)."""
    j = end - 1
    while raw[j] in _BLANK:
        j -= 1
    return j


def _before_blank(raw: bytes, j: int) -> int:
    while raw[j - 1] in _BLANK:
        j -= 1
    return j


def entries(
    raw: bytes, span: Span | None = None, count: int | None = None
) -> dict[str, tuple[int, Span]]:
    """Each member name of the object at `span`: (start of its quoted name, its value span).

    `count` is the number of distinct keys (from the parsed object). When the
    member being read is the last one, its value ends at the object's closing
    brace, so a large trailing value (params, result) is never walked.
    """
    start, end = span if span is not None else (0, len(raw))
    i = _WS.match(raw, start).end()  # type: ignore[union-attr]
    close = _closing(raw, end)
    i += 1  # past "{"
    out: dict[str, tuple[int, Span]] = {}
    while True:
        i = _WS.match(raw, i).end()  # type: ignore[union-attr]
        if i >= close:
            return out
        m = _STRING.match(raw, i)
        if m is None:
            raise ParseError("object member name expected")
        key_raw = raw[i + 1 : m.end() - 1]
        key = orjson.loads(raw[i : m.end()]) if b"\\" in key_raw else key_raw.decode()
        name_at = i
        i = _WS.match(raw, m.end()).end() + 1  # type: ignore[union-attr]  # past ":"
        i = _WS.match(raw, i).end()  # type: ignore[union-attr]
        if count is not None and len(out) == count - 1 and key not in out:
            out[key] = (name_at, (i, _before_blank(raw, close)))
            return out
        j = _value_end(raw, i)
        out.setdefault(key, (name_at, (i, j)))
        i = _WS.match(raw, j).end()  # type: ignore[union-attr]
        if i < close and raw[i] == _COMMA:
            i += 1


def members(raw: bytes, span: Span | None = None, count: int | None = None) -> dict[str, Span]:
    """Map each member name of the object at `span` to the span of its value."""
    return {key: value for key, (_, value) in entries(raw, span, count).items()}


def array_items(raw: bytes, span: Span | None = None) -> list[Span]:
    """Spans of the elements of the JSON array at `span`."""
    start, end = span if span is not None else (0, len(raw))
    i = _WS.match(raw, start).end() + 1  # type: ignore[union-attr]
    close = _closing(raw, end)
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


# ---------------------------------------------------------------------------- messages


class Message:
    """One JSON-RPC object: the bytes it arrived as, and the parsed object.

    Spans of top-level members are located lazily, once, and only when the
    message has to be re-addressed: usually by one match of the common head
    (`{"jsonrpc":"2.0","id":..,"method":..,"params":` with params last), else
    by scanning the top level.
    """

    __slots__ = ("_id", "_spans", "obj", "raw")

    def __init__(self, raw: bytes, obj: dict[str, Any]) -> None:
        self.raw = raw
        self.obj = obj
        self._spans: dict[str, Span] | None = None
        self._id: Span | None = None

    def id_span(self) -> Span:
        """Where its id's value is (the message has one): usually right after a compact
        `{"jsonrpc":"2.0","id":`, found without scanning anything else."""
        span = self._id
        if span is None:
            raw = self.raw
            if raw.startswith(_COMPACT_ID) and raw[_COMPACT_ID_LEN] in _DIGITS:
                end = raw.find(b",", _COMPACT_ID_LEN)  # an integer id, as most peers send
                if end > 0 and raw[_COMPACT_ID_LEN:end].lstrip(b"-").isdigit():
                    span = self._id = (_COMPACT_ID_LEN, end)
                    return span
            m = _ID_HEAD.match(raw)
            span = m.span(1) if m is not None else self.spans["id"]
            self._id = span
        return span

    def raw_id(self) -> bytes:
        """The exact bytes of its id (the message has one)."""
        start, end = self.id_span()
        return self.raw[start:end]

    @property
    def spans(self) -> dict[str, Span]:
        if self._spans is None:
            self._spans = _head_spans(self.raw, len(self.obj)) or members(
                self.raw, None, len(self.obj)
            )
        return self._spans

    def member(self, key: str) -> bytes | None:
        """The exact bytes of a top-level member's value, or None if absent."""
        span = self.spans.get(key)
        return None if span is None else self.raw[span[0] : span[1]]

    def with_id(self, new_id: bytes) -> bytes:
        """The message with its id replaced: the hot path of every re-addressed message."""
        start, end = self.id_span()
        raw = self.raw
        return raw[:start] + new_id + raw[end:]

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

    def inner(self) -> tuple[bytes, bytes | None]:
        """A successor envelope's wrapped method and params, as exact bytes.

        The caller has checked that `params` is an object with a string `method`.
        """
        envelope = self.obj["params"]
        raw = self.raw
        m = _COMPACT_ENVELOPE.match(raw)
        if m is not None and len(self.obj) == (4 if m.start(1) >= 0 else 3):
            # Compact and in the usual order (the envelope last): found without scanning.
            if m.start(3) < 0:
                if len(envelope) == 1:
                    return m.group(2), None
            elif len(envelope) == 2:
                close = _closing(raw, _closing(raw, len(raw)))  # the envelope's closing brace
                return m.group(2), raw[m.end() : _before_blank(raw, close)]
        start, end = self.spans["params"]
        m = _INNER_HEAD.match(raw, start)
        if m is not None:
            method = m.group(1)
            if m.start(2) < 0 and len(envelope) == 1:
                return method, None
            if m.start(2) >= 0 and len(envelope) == 2:  # the wrapped params are its last member
                return method, raw[m.end() : _before_blank(raw, _closing(raw, end))]
        spans = members(raw, (start, end), len(envelope))
        found = spans["method"]
        params = spans.get("params")
        return raw[found[0] : found[1]], None if params is None else raw[params[0] : params[1]]


def _head_spans(raw: bytes, count: int) -> dict[str, Span] | None:
    """The members' spans when the message has the common head, with its payload last."""
    m = _HEAD.match(raw)
    if m is None:
        return None
    spans = {"jsonrpc": m.span(1)}
    if m.start(_ID) >= 0:
        spans["id"] = m.span(_ID)
    if m.start(_METHOD) >= 0:
        spans["method"] = m.span(_METHOD)
    close = _closing(raw, len(raw))
    if m.start(_PAYLOAD) >= 0:
        spans[m.group(_PAYLOAD).decode()] = (m.end(), _before_blank(raw, close))
    elif m.end() != close:
        return None
    return spans if len(spans) == count else None


# ---------------------------------------------------------------------------- encoding


def encode_preserving(raw: bytes, old: Any, new: Any) -> bytes:
    """JSON for `new`, where `raw` spells `old`: every value `new` shares with `old` keeps
    the exact bytes it had in `raw` (number spellings, escapes); only changes are encoded."""
    if type(new) is dict and type(old) is dict:
        found = entries(raw, None, len(old))
        parts = []
        for key, value in new.items():
            entry = found.get(key)
            if entry is None or key not in old:
                parts.append(dumps(key) + b":" + dumps(value))
                continue
            name_at, (start, end) = entry
            name_end = _STRING.match(raw, name_at).end()  # type: ignore[union-attr]
            parts.append(raw[name_at:name_end] + b":" + _preserved(raw[start:end], old[key], value))
        return b"{" + b",".join(parts) + b"}"
    if type(new) is list and type(old) is list:
        return b"[" + b",".join(_preserved_items(raw, old, new)) + b"]"
    return dumps(new)


def _preserved_items(raw: bytes, old: list[Any], new: list[Any]) -> list[bytes]:
    """The elements of `new`: one still equal to the element at its index keeps that
    element's bytes; one equal to another element of `old` (inserted before, moved) keeps
    that one's; one changed in place is re-encoded where it differs."""
    items = array_items(raw)
    keys = [_key_of(value) for value in old]
    new_keys = [_key_of(value) for value in new]
    in_place = {i for i, key in enumerate(new_keys) if i < len(keys) and keys[i] == key}
    unused: dict[bytes, list[int]] = {}
    for index, key in enumerate(keys):
        if index not in in_place:
            unused.setdefault(key, []).append(index)
    parts = []
    for index, value in enumerate(new):
        found = index if index in in_place else None
        if found is None:
            same = unused.get(new_keys[index])
            found = same.pop(0) if same else None
        if found is not None:
            start, end = items[found]
            parts.append(raw[start:end])
        elif index < len(old) and type(old[index]) is type(value):
            start, end = items[index]
            parts.append(encode_preserving(raw[start:end], old[index], value))
        else:
            parts.append(dumps(value))
    return parts


def _key_of(value: Any) -> bytes:
    try:
        return dumps(value)
    except TypeError:
        return repr(value).encode()


def _preserved(raw: bytes, old: Any, new: Any) -> bytes:
    if old is new and type(old) not in (dict, list):
        return raw
    if type(old) is type(new) and same(old, new):
        return raw
    return encode_preserving(raw, old, new)


def raw_integer(raw: bytes) -> int | None:
    """The integer spelled by `raw`, exactly, or None if it is not an integer literal."""
    if _INTEGER.fullmatch(raw) is None:
        return None
    return int(raw)


# ---------------------------------------------------------------------------- building


def error_response(raw_id: bytes, code: int, message: str, data: Any = None) -> bytes:
    """A JSON-RPC error response (no newline) for the request whose id spelled `raw_id`."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"error":' + dumps(error) + b"}"


def response(raw_id: bytes, payload_key: bytes, payload: bytes) -> bytes:
    """A response (no newline) from raw parts: `payload_key` is b"result" or b"error"."""
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"' + payload_key + b'":' + payload + b"}"


def request(raw_id: bytes | None, method: bytes, params: bytes | None) -> bytes:
    """A request (or notification when `raw_id` is None), no newline, from raw parts."""
    head = (
        b'{"jsonrpc":"2.0","method":'
        if raw_id is None
        else b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":'
    )
    if params is None:
        return head + method + b"}"
    return head + method + b',"params":' + params + b"}"


def envelope(raw_id: bytes | None, wrapper: bytes, method: bytes, params: bytes | None) -> bytes:
    """A successor envelope (`wrapper` is the quoted method name) around one message."""
    inner = b'{"method":' + method + (b"}" if params is None else b',"params":' + params + b"}")
    return request(raw_id, wrapper, inner)
