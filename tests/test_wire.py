"""The raw scanner must find exactly the bytes of each member, whatever the spelling."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from conductor import wire

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _spellings(value: object) -> list[bytes]:
    """Several byte spellings of the same JSON value (escapes, whitespace)."""
    return [
        json.dumps(value).encode(),
        json.dumps(value, ensure_ascii=False).encode(),
        json.dumps(value, indent=1).encode(),
        json.dumps(value, separators=(",", ":")).encode(),
    ]


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_members_span_each_value(obj: dict[str, object]) -> None:
    for raw in _spellings(obj):
        spans = wire.members(raw, None, len(orjson.loads(raw)))
        assert list(spans) == list(obj)
        for key, (start, end) in spans.items():
            assert json.loads(raw[start:end]) == obj[key]


@given(st.lists(json_values, max_size=6))
def test_array_items(items: list[object]) -> None:
    for raw in _spellings(items):
        spans = wire.array_items(raw)
        assert [json.loads(raw[s:e]) for s, e in spans] == items


def test_replace_keeps_every_other_byte() -> None:
    raw = b'{"jsonrpc":"2.0", "id" : "abc","method":"x","params":{"n":1.0e5,"big":123456789012345678901234567890,"_meta":{}} }'
    msg = wire.Message(raw, orjson.loads(raw))
    out = msg.replace({"id": b"7"})
    assert out == raw.replace(b'"abc"', b"7")


def test_trailing_member_is_not_walked_but_found() -> None:
    big = "z" * 100_000
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": big}})
    msg = wire.Message(raw, orjson.loads(raw))
    assert msg.member("result") == orjson.dumps({"text": big})


def test_members_out_of_order_and_escaped_keys() -> None:
    raw = b'{"params":{"a":[1,{"b":"}"}]},"\\u0069d":5,"method":"m"}'
    spans = wire.members(raw, None, 3)
    assert raw[slice(*spans["id"])] == b"5"
    assert raw[slice(*spans["params"])] == b'{"a":[1,{"b":"}"}]}'


def test_raw_integer_is_exact() -> None:
    assert wire.raw_integer(b"123456789012345678901234567890") == 123456789012345678901234567890
    assert wire.raw_integer(b"1.0") is None
    assert wire.raw_integer(b'"1"') is None
    assert wire.raw_integer(b"-1") == -1


def test_envelope_and_request_shapes() -> None:
    line = wire.envelope(b"3", b'"_proxy/successor"', b'"session/new"', b'{"cwd":"/"}')
    assert orjson.loads(line) == {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "_proxy/successor",
        "params": {"method": "session/new", "params": {"cwd": "/"}},
    }
    assert orjson.loads(wire.request(None, b'"n"', None)) == {"jsonrpc": "2.0", "method": "n"}
