"""Newline-delimited framing: byte streams to lines, in time linear in the line length.

A line arriving in many reads is kept as a list of pieces and joined once,
when its newline comes; the pieces are bounded, so a peer that never ends a
line cannot make the conductor buffer without limit.
"""

from __future__ import annotations

__all__ = ["MAX_LINE", "STDERR_PIECE", "LineSplitter", "TextLines"]

MAX_LINE = 256 << 20  # one JSON-RPC message may be large, but not without bound
STDERR_PIECE = 16 << 10  # a diagnostic line longer than this is forwarded in pieces


class LineSplitter:
    """Splits a byte stream into lines, keeping an incomplete tail in pieces.

    A line that outgrows `limit` before its newline is dropped (up to that
    newline) and counted in `dropped`.
    """

    __slots__ = ("_discarding", "_pending", "_size", "dropped", "limit")

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.limit = limit
        self._pending: list[bytes] = []
        self._size = 0
        self._discarding = False
        self.dropped = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines in `data` (after what came before). Blank lines are the
        caller's to skip (they are rare: filtering them here would cost every line)."""
        if data[-1:] == b"\n" and not self._pending and not self._discarding:
            lines = data.split(b"\n")  # the usual case: whole lines, nothing pending
            lines.pop()
            return lines
        if b"\n" not in data:
            if not self._discarding:
                self._pending.append(data)
                self._size += len(data)
                self._check()
            return []
        if self._discarding:
            self._discarding = False
            data = data[data.index(b"\n") + 1 :]
        elif self._pending:
            self._pending.append(data)
            data = b"".join(self._pending)
            self._pending.clear()
        lines = data.split(b"\n")
        tail = lines.pop()
        self._size = len(tail)
        if tail:
            self._pending.append(tail)
            self._check()
        return lines

    def _check(self) -> None:
        if self._size > self.limit:
            self._pending.clear()
            self._size = 0
            self._discarding = True
            self.dropped += 1

    @property
    def leftover(self) -> bytes:
        """An incomplete last line (at end of stream)."""
        return b"" if self._discarding else b"".join(self._pending)


class TextLines:
    """Splits a diagnostic stream (stderr) into lines, handing over a line that grows past
    `piece` bytes without ending in pieces of that size."""

    __slots__ = ("_pending", "_size", "piece")

    def __init__(self, piece: int = STDERR_PIECE) -> None:
        self.piece = piece
        self._pending: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            self._pending.append(data[start:end])
            out.append(b"".join(self._pending))
            self._pending.clear()
            self._size = 0
            start = end + 1
        rest = len(data) - start
        if rest:
            self._pending.append(data[start:] if start else data)
            self._size += rest
            while self._size >= self.piece:
                joined = b"".join(self._pending)
                out.append(joined[: self.piece])
                remainder = joined[self.piece :]
                self._pending = [remainder] if remainder else []
                self._size = len(remainder)
        return out

    def finish(self) -> list[bytes]:
        """What is left at end of stream."""
        tail = b"".join(self._pending)
        self._pending.clear()
        self._size = 0
        return [tail] if tail else []
