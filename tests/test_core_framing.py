"""Framing (`conductor/framing.py`): byte streams to lines, bounded, and linear in the line
length (proved by counting the bytes joined, not with a clock)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from conductor.framing import LineSplitter, TextLines


def _joined_bytes(run: Callable[[], Any]) -> tuple[int, int]:
    """Run `run`, counting the `join` calls framing makes and the bytes they copy (the
    pieces pending when each is called)."""
    joins = copied = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal joins, copied
        if (
            event == "c_call"
            and getattr(arg, "__name__", None) == "join"
            and frame.f_code.co_filename.endswith("framing.py")
        ):
            joins += 1
            copied += sum(len(piece) for piece in frame.f_locals["self"]._pending)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return joins, copied


# ------------------------------------------------------------------ LineSplitter


def test_whole_lines_in_one_read() -> None:
    assert LineSplitter().feed(b'{"a":1}\n{"b":2}\n') == [b'{"a":1}', b'{"b":2}']


def test_a_line_across_reads() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b"1}\n" + b'{"b"') == [b'{"a":1}']
    assert splitter.feed(b":") == []
    assert splitter.feed(b"2}\n") == [b'{"b":2}']
    assert splitter.leftover == b""


def test_a_newline_alone_ends_the_pending_line() -> None:
    splitter = LineSplitter()
    splitter.feed(b"abc")
    assert splitter.feed(b"\n") == [b"abc"]


def test_blank_lines_are_handed_over_for_the_caller_to_skip() -> None:
    assert LineSplitter().feed(b"\n\na\n") == [b"", b"", b"a"]


def test_the_incomplete_tail_is_the_leftover_at_end_of_stream() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"a\nb") == [b"a"]
    assert splitter.feed(b"cd") == []
    assert splitter.leftover == b"bcd"


def test_a_line_that_outgrows_the_limit_is_dropped_counted_and_the_next_is_intact() -> None:
    splitter = LineSplitter(limit=10)
    assert splitter.feed(b"x" * 6) == []
    assert splitter.feed(b"x" * 6) == []
    assert splitter.dropped == 1
    assert splitter.feed(b"x" * 100) == [], "still the dropped line: nothing kept"
    assert splitter.leftover == b""
    assert splitter.feed(b"xxx\nnext\nafter") == [b"next"]
    assert splitter.leftover == b"after"
    assert splitter.dropped == 1


def test_a_line_at_the_limit_is_kept() -> None:
    splitter = LineSplitter(limit=10)
    splitter.feed(b"x" * 10)
    assert splitter.feed(b"\n") == [b"x" * 10]
    assert splitter.dropped == 0


def test_the_tail_of_a_read_counts_toward_the_limit() -> None:
    splitter = LineSplitter(limit=10)
    assert splitter.feed(b"ok\n" + b"y" * 11) == [b"ok"]
    assert splitter.dropped == 1
    assert splitter.feed(b"y\nz\n") == [b"z"]


def test_pending_bytes_stay_bounded_by_the_limit() -> None:
    splitter = LineSplitter(limit=1000)
    for _ in range(100):
        splitter.feed(b"q" * 99)
        assert sum(len(piece) for piece in splitter._pending) <= 1000
    assert splitter.dropped == 1


def test_two_long_lines_dropped_in_a_row_are_counted_twice() -> None:
    splitter = LineSplitter(limit=4)
    splitter.feed(b"aaaaa")
    splitter.feed(b"a\nbbbbb")
    assert splitter.dropped == 2
    assert splitter.feed(b"b\nok\n") == [b"ok"]


def test_a_long_line_in_many_pieces_is_kept_as_those_pieces_and_joined_once() -> None:
    """Linear in the line length: the pending line is the list of the very pieces fed (no
    piece is copied while the line grows), and its newline joins them exactly once."""
    splitter = LineSplitter()
    pieces = [bytes([65 + i % 26]) * 1000 for i in range(2000)]
    for piece in pieces:
        assert splitter.feed(piece) == []
    assert len(splitter._pending) == len(pieces)
    assert all(kept is fed for kept, fed in zip(splitter._pending, pieces, strict=True))
    lines: list[bytes] = []
    joins, copied = _joined_bytes(lambda: lines.extend(splitter.feed(b"\n")))
    assert lines == [b"".join(pieces)]
    assert joins == 1 and copied == len(lines[0]) + 1


def test_bytes_joined_grow_linearly_with_the_line_length() -> None:
    def copied_for(pieces: int) -> int:
        splitter = LineSplitter()

        def feed() -> None:
            for _ in range(pieces):
                splitter.feed(b"z" * 512)
            assert splitter.feed(b"\n") == [b"z" * 512 * pieces]

        return _joined_bytes(feed)[1]

    small, large = copied_for(100), copied_for(1000)
    assert small == 512 * 100 + 1
    assert large == 512 * 1000 + 1  # ten times the line, ten times the bytes: not a hundred


# -------------------------------------------------------------------- TextLines


def test_stderr_lines_across_reads() -> None:
    lines = TextLines(piece=100)
    assert lines.feed(b"warming") == []
    assert lines.feed(b" up\nready\npart") == [b"warming up", b"ready"]
    assert lines.finish() == [b"part"]
    assert lines.finish() == []


def test_a_long_stderr_line_is_forwarded_in_pieces_of_the_piece_size() -> None:
    lines = TextLines(piece=8)
    assert lines.feed(b"0123456789abcdefXY") == [b"01234567", b"89abcdef"]
    assert lines.feed(b"Z\n") == [b"XYZ"]


def test_a_progress_bar_without_newlines_comes_out_in_pieces() -> None:
    lines = TextLines(piece=10)
    out: list[bytes] = []
    for _ in range(25):
        out += lines.feed(b"\r[##  ] 4%")  # 10 bytes, no newline ever
    out += lines.finish()
    assert b"".join(out) == b"\r[##  ] 4%" * 25
    assert all(len(piece) == 10 for piece in out)


def test_stderr_pending_stays_below_the_piece_size() -> None:
    lines = TextLines(piece=64)
    for _ in range(1000):
        lines.feed(b"abc")
        assert lines._size < 64
        assert sum(len(piece) for piece in lines._pending) == lines._size


def test_an_empty_stderr_line_is_a_line() -> None:
    assert TextLines().feed(b"\n") == [b""]


def test_stderr_splitting_copies_each_byte_a_bounded_number_of_times() -> None:
    piece = 1024
    lines = TextLines(piece=piece)
    total = 1000 * 300
    out: list[bytes] = []

    def feed() -> None:
        for _ in range(1000):
            out.extend(lines.feed(b"s" * 300))
        out.extend(lines.finish())

    _joins, copied = _joined_bytes(feed)
    assert b"".join(out) == b"s" * total
    assert copied <= 2 * total
