"""The wire layer (`conductor/wire.py`): the exact fallback parser, `encode_preserving`
(property-tested: random JSON in random spellings, random changes), and the members the
router rewrites (`id`, the successor envelope) in compact, spaced and reordered spellings."""

from __future__ import annotations

import copy
import json
import math
import random
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conductor import wire

PROPERTY = settings(
    max_examples=60,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: the tier stays fast
    derandomize=True,  # the same examples on every run: a verdict never depends on luck
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)

# ------------------------------------------------------------------ the parser


def test_parse_falls_back_to_the_exact_parser_for_numbers_beyond_double_range() -> None:
    value = wire.parse(b'{"a":1e400,"b":-1e400,"c":[1E+999]}')
    assert value["a"] == math.inf and value["b"] == -math.inf and value["c"] == [math.inf]


def test_parse_falls_back_to_the_exact_parser_for_lone_surrogates() -> None:
    assert wire.parse(b'{"s":"\\ud800","t":"a\\udfffb"}') == {"s": "\ud800", "t": "a\udfffb"}


def test_a_surrogate_pair_is_one_character() -> None:
    assert wire.parse(b'"\\ud83d\\ude00"') == "\U0001f600"


@pytest.mark.parametrize(
    "line",
    [b"NaN", b'{"a":NaN}', b"[Infinity]", b"-Infinity", b'{"a":1}x', b"{", b"", b"\xff", b"01"],
)
def test_parse_refuses_what_is_not_json(line: bytes) -> None:
    with pytest.raises(wire.ParseError):
        wire.parse(line)


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(wire.ParseError, ValueError)


def test_dumps_encodes_what_orjson_cannot() -> None:
    assert wire.dumps({"big": 10**30}) == b'{"big":1000000000000000000000000000000}'
    assert json.loads(wire.dumps({"s": "\ud800"})) == {"s": "\ud800"}
    assert wire.dumps([1.5, None]) == b"[1.5,null]"


def test_dumps_refuses_what_json_cannot_carry_with_a_type_error() -> None:
    with pytest.raises(TypeError):
        wire.dumps({"x": {1, 2}})


def test_same_tells_json_values_apart_as_json_does() -> None:
    assert wire.same({"a": [1, "x"]}, {"a": [1, "x"]})
    assert not wire.same(1, 1.0) and not wire.same(1, True) and not wire.same(0.0, -0.0)
    assert wire.same(10**30, 10**30) and not wire.same(10**30, 10**30 + 1)


# -------------------------------------------------------- spellings of JSON


_BLANKS = [b"", b" ", b"\n", b"\t ", b"\r\n  "]


def _float_spellings(x: float) -> list[bytes]:
    """Spellings that every exact JSON parser reads as the float `x` (as a float)."""
    r = repr(x)
    sign, digits, exponent = Decimal(r).as_tuple()
    assert isinstance(exponent, int)
    mantissa = ("-" if sign else "") + "".join(map(str, digits))
    out = {r, f"{mantissa}e{exponent}", f"{mantissa}E{exponent:+d}"}
    if "e" not in r:
        out |= {r + "00", r + "0e0", r + "E-0"}
    return sorted(s.encode() for s in out)


def _spell_string(rnd: random.Random, text: str) -> bytes:
    out = ['"']
    for ch in text:
        code = ord(ch)
        must = ch in '"\\' or code < 0x20 or 0xD800 <= code <= 0xDFFF
        if code > 0xFFFF:
            high, low = divmod(code - 0x10000, 0x400)
            escaped = f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}"
        else:
            escaped = f"\\u{code:04x}" if rnd.random() < 0.5 else f"\\u{code:04X}"
        if ch in '"\\' and rnd.random() < 0.5:
            escaped = "\\" + ch
        out.append(escaped if must or rnd.random() < 0.15 else ch)
    out.append('"')
    return "".join(out).encode("utf-8")


def _spell(rnd: random.Random, value: Any) -> bytes:
    """`value` in a random spelling: blanks, escapes and number spellings vary."""

    def blank() -> bytes:
        return rnd.choice(_BLANKS)

    if value is None or value is True or value is False:
        return json.dumps(value).encode()
    if type(value) is int:
        return b"-0" if value == 0 and rnd.random() < 0.5 else str(value).encode()
    if type(value) is float:
        return rnd.choice(_float_spellings(value))
    if type(value) is str:
        return _spell_string(rnd, value)
    if type(value) is list:
        items = [blank() + _spell(rnd, item) + blank() for item in value]
        return b"[" + (b",".join(items) if items else blank()) + b"]"
    assert type(value) is dict
    members = [
        blank() + _spell_string(rnd, key) + blank() + b":" + blank() + _spell(rnd, item) + blank()
        for key, item in value.items()
    ]
    return b"{" + (b",".join(members) if members else blank()) + b"}"


_TOKEN = re.compile(rb'[ \t\r\n]*("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null|[\[\]{},:])')


def _value_spans(raw: bytes) -> dict[tuple[Any, ...], bytes]:
    """The exact bytes of every value in `raw`, by path (an independent little parser)."""
    tokens = [(m.group(1), m.start(1), m.end(1)) for m in _TOKEN.finditer(raw)]
    spans: dict[tuple[Any, ...], bytes] = {}
    position = 0

    def value(path: tuple[Any, ...]) -> int:
        nonlocal position
        token, start, end = tokens[position]
        position += 1
        if token == b"{":
            while tokens[position][0] != b"}":
                key = json.loads(tokens[position][0])
                position += 2  # the key and ":"
                value((*path, key))
                if tokens[position][0] == b",":
                    position += 1
            end = tokens[position][2]
            position += 1
        elif token == b"[":
            index = 0
            while tokens[position][0] != b"]":
                value((*path, index))
                index += 1
                if tokens[position][0] == b",":
                    position += 1
            end = tokens[position][2]
            position += 1
        spans[path] = raw[start:end]
        return end

    value(())
    return spans


def _strict(a: Any, b: Any) -> bool:
    """Equal as JSON values, type for type, key order included (-0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_strict(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(map(_strict, a, b))
    if type(a) is float:
        return repr(a) == repr(b)
    return bool(a == b)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from(["\ud800", "a\udfffb", "caf\u00e9", '"q"\\', "\U0001f600"])
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=4), values, max_size=5)


def _mutate(data: st.DataObject, value: Any) -> Any:
    """A changed copy: values replaced, members added or removed, elements replaced in place
    (lists keep their length)."""
    if type(value) is dict:
        out = {}
        for key, item in value.items():
            action = data.draw(st.sampled_from(["keep", "keep", "replace", "delete", "descend"]))
            if action == "keep":
                out[key] = item
            elif action == "replace":
                out[key] = data.draw(values)
            elif action == "descend":
                out[key] = _mutate(data, item)
        for key in data.draw(st.lists(st.text(max_size=4), max_size=2)):
            if key not in value:
                out[key] = data.draw(values)
        return out
    if type(value) is list:
        items = []
        for item in value:
            action = data.draw(st.sampled_from(["keep", "replace", "descend"]))
            if action == "keep":
                items.append(item)
            elif action == "replace":
                items.append(data.draw(values))
            else:
                items.append(_mutate(data, item))
        return items
    return value if data.draw(st.booleans()) else data.draw(values)


Parser = Any  # bytes -> value


def _exact(raw: bytes) -> Any:
    return json.loads(raw)


def _as_orjson_reads(value: Any) -> Any:
    """`value` with integers beyond orjson's range as the floats orjson reads them as."""
    if type(value) is int and not -(2**63) <= value < 2**64:
        return float(value)
    if type(value) is dict:
        return {k: _as_orjson_reads(v) for k, v in value.items()}
    if type(value) is list:
        return [_as_orjson_reads(v) for v in value]
    return value


PARSERS = [pytest.param(_exact, id="exact"), pytest.param(wire.parse, id="wire.parse")]


def _expect_kept(
    old: Any,
    new: Any,
    path: tuple[Any, ...],
    before: dict[tuple[Any, ...], bytes],
    after: dict[tuple[Any, ...], bytes],
) -> None:
    """Check that every value `new` did not change keeps its bytes."""
    if type(old) is dict and type(new) is dict:
        for key, item in new.items():
            if key not in old:
                continue
            here = (*path, key)
            if _strict(old[key], item):
                assert after[here] == before[here], (here, before[here], after[here])
            else:
                _expect_kept(old[key], item, here, before, after)
    elif type(old) is list and type(new) is list:
        old_keys = [wire.dumps(v) for v in old]
        new_keys = [wire.dumps(v) for v in new]
        for index, item in enumerate(new):
            here = (*path, index)
            if new_keys[index] in old_keys:
                # Equal to an old element: it keeps the bytes of one that spells this value
                # (which one is the encoder's choice when several are equal).
                assert _strict(_as_orjson_reads(json.loads(after[here])), _as_orjson_reads(item))
                unique = old_keys.count(new_keys[index]) == new_keys.count(new_keys[index]) == 1
                if unique and _strict(old[index], item):
                    assert after[here] == before[here], (here, before[here], after[here])
            elif index < len(old):
                _expect_kept(old[index], item, here, before, after)


@pytest.mark.parametrize("parse", PARSERS)
@PROPERTY
@given(data=st.data())
def test_encode_preserving_parses_to_the_new_value_keeping_unchanged_bytes(
    parse: Parser, data: st.DataObject
) -> None:
    rnd = data.draw(st.randoms(use_true_random=False))
    raw = _spell(rnd, data.draw(objects))
    old = parse(raw)
    new = _mutate(data, copy.deepcopy(old))
    out = wire.encode_preserving(raw, old, new)
    assert _strict(_as_orjson_reads(json.loads(out)), _as_orjson_reads(new))
    _expect_kept(old, new, (), _value_spans(raw), _value_spans(out))


@pytest.mark.parametrize("parse", PARSERS)
@PROPERTY
@given(data=st.data())
def test_encode_preserving_of_an_unchanged_value_keeps_the_bytes_of_each_member(
    parse: Parser, data: st.DataObject
) -> None:
    rnd = data.draw(st.randoms(use_true_random=False))
    raw = _spell(rnd, data.draw(objects))
    old = parse(raw)
    out = wire.encode_preserving(raw, old, copy.deepcopy(old))
    before, after = _value_spans(raw), _value_spans(out)
    for key in old:
        assert after[(key,)] == before[(key,)]


@PROPERTY
@given(st.data())
def test_spellings_are_valid_json_of_the_value(data: st.DataObject) -> None:
    """The generator's own check: every spelling it makes parses back to its value."""
    value = data.draw(values)
    raw = _spell(data.draw(st.randoms(use_true_random=False)), value)
    assert _strict(json.loads(raw), value)
    assert _value_spans(raw)[()] == raw.strip()


def test_encode_preserving_keeps_every_spelling_beside_a_change() -> None:
    raw = (
        b'{ "text" : "old", "big":123456789012345678901234567890, "half":1.50, "h":1E+2,'
        b'"z":-0.0, "huge":1e400, "s":"\\ud800", "e":"caf\\u00e9", "k\\u0065y":[1.50, {"a":1E+2}]}'
    )
    old = wire.parse(raw)
    new = {**old, "text": "new"}
    out = wire.encode_preserving(raw, old, new)
    assert out == (
        b'{"text":"new","big":123456789012345678901234567890,"half":1.50,"h":1E+2,'
        b'"z":-0.0,"huge":1e400,"s":"\\ud800","e":"caf\\u00e9","k\\u0065y":[1.50, {"a":1E+2}]}'
    )


def test_encode_preserving_changes_one_nested_value_and_nothing_else() -> None:
    raw = b'{"a":{"b":[1.50,{"c":1E+2,"d":"x"}],"e":-0.0}}'
    old = wire.parse(raw)
    new = copy.deepcopy(old)
    new["a"]["b"][1]["d"] = "y"
    assert (
        wire.encode_preserving(raw, old, new) == b'{"a":{"b":[1.50,{"c":1E+2,"d":"y"}],"e":-0.0}}'
    )


def test_changing_one_element_in_place_does_not_respell_an_equal_sibling() -> None:
    """Two spellings of 1.5 in one array; the first element is replaced, the second is not
    touched: it must keep its own bytes, not take the first one's."""
    raw = b'{"l":[1.50,15e-1]}'
    old = wire.parse(raw)
    new = {"l": ["changed", old["l"][1]]}
    assert wire.encode_preserving(raw, old, new) == b'{"l":["changed",15e-1]}'


def test_removing_and_inserting_elements_keeps_the_others_bytes() -> None:
    raw = b'[1.50, "a\\u0062", 1E+2]'
    old = wire.parse(raw)
    assert wire.encode_preserving(raw, old, [old[2], "new", old[0]]) == b'[1E+2,"new",1.50]'
    assert wire.encode_preserving(raw, old, old[1:]) == b'["a\\u0062",1E+2]'


def test_a_changed_value_of_another_type_is_encoded_anew() -> None:
    raw = b'{"a":1.50,"b":{"c":1}}'
    old = wire.parse(raw)
    assert wire.encode_preserving(raw, old, {"a": "s", "b": [1]}) == b'{"a":"s","b":[1]}'


# -------------------------------------------------------------- the message head


def _message(raw: bytes) -> wire.Message:
    return wire.Message(raw, wire.parse(raw))


@pytest.mark.parametrize(
    ("raw", "raw_id"),
    [
        (b'{"jsonrpc":"2.0","id":12,"method":"m","params":{}}', b"12"),
        (b'{"jsonrpc":"2.0","id":-3,"result":{}}', b"-3"),
        (b'{"jsonrpc":"2.0","id":7}', b"7"),
        (b'{"jsonrpc":"2.0","id":"a,b","method":"m"}', b'"a,b"'),
        (b'{"jsonrpc":"2.0","id":"q\\"},\\\\","method":"m"}', b'"q\\"},\\\\"'),
        (b'{ "jsonrpc" : "2.0" , "id" : "abc" , "method" : "m" }', b'"abc"'),
        (b'{"jsonrpc":"2.0","id":null,"error":{}}', b"null"),
        (b'{"method":"m","params":{"id":5,"x":"\\"id\\":6"},"id":9,"jsonrpc":"2.0"}', b"9"),
        (b'{"params":[{"id":1}],"jsonrpc":"2.0","method":"m","id" : "last" }', b'"last"'),
        (b'{"jsonrpc":"2.0","method":"m","id":4}', b"4"),
        (b'{"jsonrpc":"2.0","id":1e2,"method":"m"}', b"1e2"),
        (b'{"jsonrpc":"2.0","\\u0069d":3,"method":"m"}', b"3"),
    ],
)
def test_id_span_finds_the_top_level_id_in_any_spelling(raw: bytes, raw_id: bytes) -> None:
    msg = _message(raw)
    assert msg.raw_id() == raw_id
    start, end = msg.id_span()
    assert raw[:start] + b"ID" + raw[end:] == msg.with_id(b"ID")
    replaced = msg.with_id(b'"new"')
    assert wire.parse(replaced) == {**msg.obj, "id": "new"}


@PROPERTY
@given(st.data())
def test_with_id_replaces_exactly_the_id_in_random_spellings(data: st.DataObject) -> None:
    rnd = data.draw(st.randoms(use_true_random=False))
    id_value = data.draw(st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6))
    members = {
        "jsonrpc": b'"2.0"',
        "id": _spell(rnd, id_value),
        "method": _spell(rnd, data.draw(st.text(min_size=1, max_size=6))),
        "params": _spell(rnd, data.draw(objects)),
    }
    order = data.draw(st.permutations(list(members)))
    blank = data.draw(st.sampled_from(_BLANKS))
    raw = b"{"
    id_at = 0
    for i, key in enumerate(order):
        head = (b"," if i else b"") + blank + b'"' + key.encode() + b'"' + blank + b":" + blank
        raw += head
        if key == "id":
            id_at = len(raw)
        raw += members[key] + blank
    raw += b"}"
    msg = _message(raw)
    assert msg.raw_id() == members["id"]
    assert msg.with_id(b"42") == raw[:id_at] + b"42" + raw[id_at + len(members["id"]) :]


@pytest.mark.parametrize(
    ("raw", "method", "params"),
    [
        (
            b'{"jsonrpc":"2.0","id":1,"method":"_proxy/successor","params":{"method":"x","params":{"a":1.50}}}',
            b'"x"',
            b'{"a":1.50}',
        ),
        (
            b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"x"}}',
            b'"x"',
            None,
        ),
        (
            b'{ "jsonrpc":"2.0", "method":"_proxy/successor", "params" : { "params" : [1E+2] , "method" : "y" } }',
            b'"y"',
            b"[1E+2]",
        ),
        (
            b'{"params":{"method":"z","_meta":{"h":1},"params":{"method":"inner"}},"method":"proxy/successor","jsonrpc":"2.0","id":"k"}',
            b'"z"',
            b'{"method":"inner"}',
        ),
        (
            b'{"jsonrpc":"2.0","id":2,"method":"_proxy/successor","params":{"method":"a\\"b","params":{"x":"}"},"meta":{}}}',
            b'"a\\"b"',
            b'{"x":"}"}',
        ),
        (
            b'{"jsonrpc":"2.0","id":2,"method":"_proxy/successor","params":{"method":"m","params":{"n":1}},"x":1}',
            b'"m"',
            b'{"n":1}',
        ),
        (
            b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m","params":{"n":1} }\n}',
            b'"m"',
            b'{"n":1}',
        ),
        (
            b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"m","params":{"n":1}},"id":5}',
            b'"m"',
            b'{"n":1}',
        ),
    ],
    ids=[
        "compact",
        "no-params",
        "spaced-reordered",
        "meta-first",
        "escapes-legacy-meta",
        "extra-member",
        "trailing-blanks",
        "compact-id-last",
    ],
)
def test_inner_finds_the_wrapped_method_and_params_exactly(
    raw: bytes, method: bytes, params: bytes | None
) -> None:
    assert _message(raw).inner() == (method, params)


@PROPERTY
@given(st.data())
def test_inner_in_random_spellings(data: st.DataObject) -> None:
    rnd = data.draw(st.randoms(use_true_random=False))
    inner_method = _spell(rnd, data.draw(st.text(min_size=1, max_size=6)))
    inner_params = _spell(rnd, data.draw(objects | st.lists(values, max_size=3)))
    envelope_members = {"method": inner_method, "params": inner_params}
    if data.draw(st.booleans()):
        envelope_members[data.draw(st.sampled_from(["_meta", "meta"]))] = _spell(rnd, {"h": 1})
    blank = data.draw(st.sampled_from(_BLANKS))

    def obj(members: dict[str, bytes]) -> bytes:
        order = data.draw(st.permutations(list(members)))
        body = b",".join(
            blank + b'"' + k.encode() + b'"' + blank + b":" + blank + members[k] + blank
            for k in order
        )
        return b"{" + body + b"}"

    top = {"jsonrpc": b'"2.0"', "method": b'"_proxy/successor"', "params": obj(envelope_members)}
    if data.draw(st.booleans()):
        top["id"] = _spell(rnd, data.draw(st.integers(0, 10**6)))
    raw = obj(top)
    assert _message(raw).inner() == (inner_method, inner_params)


def test_member_and_replace_keep_every_other_byte() -> None:
    raw = b'{ "jsonrpc":"2.0","params" : {"n":1.50} , "id":"x","method":"m"}'
    msg = _message(raw)
    assert msg.member("params") == b'{"n":1.50}'
    assert msg.member("nothing") is None
    assert msg.replace({"params": b"[1]", "id": b"3"}) == (
        b'{ "jsonrpc":"2.0","params" : [1] , "id":3,"method":"m"}'
    )


def test_a_large_trailing_member_is_found_without_walking_it() -> None:
    big = b'{"blob":"' + b"z" * 1_000_000 + b'"}'
    raw = b'{"jsonrpc":"2.0","id":1,"result":' + big + b"}"
    msg = _message(raw)
    assert msg.member("result") == big


def test_wrap_notification_joins_bytes_for_a_compact_notification() -> None:
    raw = b'{"jsonrpc":"2.0","method":"session/update","params":{"n":1.50}}'
    wrapped = wire.wrap_notification(_message(raw), b'"_proxy/successor"')
    assert wrapped == (
        b'{"jsonrpc":"2.0","method":"_proxy/successor","params":{"method":"session/update",'
        b'"params":{"n":1.50}}}'
    )
    spaced = b'{"jsonrpc":"2.0", "params":{"n":1}, "method":"x"}'
    assert wire.wrap_notification(_message(spaced), b'"_proxy/successor"') is None


def test_array_items_of_a_batch() -> None:
    raw = b'[ {"a":[1,2]} ,5,"x,y", [] ]'
    assert [raw[s:e] for s, e in wire.array_items(raw)] == [b'{"a":[1,2]}', b"5", b'"x,y"', b"[]"]


def test_error_response_and_request_shapes() -> None:
    assert wire.error_response(b'"i"', -32600, "Invalid Request", {"d": 1}) == (
        b'{"jsonrpc":"2.0","id":"i","error":{"code":-32600,"message":"Invalid Request","data":{"d":1}}}'
    )
    assert (
        wire.request(b"3", b'"m"', b"[1.50]")
        == b'{"jsonrpc":"2.0","id":3,"method":"m","params":[1.50]}'
    )
    assert wire.envelope(None, b'"proxy/successor"', b'"m"', None) == (
        b'{"jsonrpc":"2.0","method":"proxy/successor","params":{"method":"m"}}'
    )
