"""Newline-delimited I/O on non-blocking file descriptors, with one wake-up per burst.

Readers read everything available, split it into lines and hand the lines
over in one call. Writers never block the router: a line is queued, and the
queue is written with one `os.write` per burst (`flush`). Bytes the pipe
cannot take yet wait in a backlog that a small task drains; readers check
`congested` after each burst and wait, which bounds memory when a peer is slow.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

__all__ = ["FdWriter", "LineSplitter", "Writer", "read_lines"]

CHUNK = 1 << 18
HIGH_WATER = 1 << 22  # bytes waiting toward one peer before its sources pause
MAX_LINE = 1 << 30  # one message may be large, but not without bound


class LineTooLong(Exception):
    """A peer sent more than MAX_LINE bytes without a newline."""


class LineSplitter:
    """Splits a byte stream into lines, keeping any incomplete tail."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        if b"\n" not in data:
            self._pending.append(data)
            if sum(map(len, self._pending)) > MAX_LINE:
                raise LineTooLong
            return []
        if self._pending:
            self._pending.append(data)
            data = b"".join(self._pending)
            self._pending.clear()
        lines = data.split(b"\n")
        tail = lines.pop()
        if tail:
            self._pending.append(tail)
        return [line for line in lines if line.strip()]

    @property
    def leftover(self) -> bytes:
        return b"".join(self._pending)


async def read_lines(
    fd: int,
    deliver: Callable[[list[bytes]], Awaitable[None] | None],
) -> None:
    """Read `fd` until EOF, handing each burst of complete lines to `deliver`.

    `deliver` may return an awaitable (to apply back-pressure) or None. A read
    that finds data is not preceded by a scheduler round trip; a checkpoint is
    forced every few bursts so a busy peer cannot starve the others.
    """
    splitter = LineSplitter()
    streak = 0
    while True:
        try:
            data: bytes | None = os.read(fd, CHUNK)
        except BlockingIOError:
            data = None
        except OSError as exc:
            if exc.errno in (errno.EBADF, errno.EIO):
                return
            raise
        if data == b"":
            tail = splitter.leftover
            if tail.strip():
                await _settle(deliver([tail]))
            return
        if data:
            lines = splitter.feed(data)
            if lines:
                await _settle(deliver(lines))
            if len(data) == CHUNK:  # more is probably waiting: read on, but stay fair
                streak += 1
                if streak >= 8:
                    streak = 0
                    await trio.lowlevel.checkpoint()
                continue
        # Drained: wait for more instead of paying for a failed read.
        streak = 0
        try:
            await trio.lowlevel.wait_readable(fd)
        except trio.ClosedResourceError:
            return


async def _settle(pending: Awaitable[None] | None) -> None:
    if pending is not None:
        await pending


class Writer(Protocol):
    """What the runner needs from a peer's writer: a pipe (FdWriter) or a WebSocket (WsWriter)."""

    name: str

    def send(self, line: bytes) -> None: ...

    def flush(self) -> None: ...

    @property
    def congested(self) -> bool: ...

    @property
    def idle(self) -> bool: ...

    async def wait_drained(self) -> None: ...

    async def drain_forever(self) -> None: ...


class FdWriter:
    """Queues lines for one peer and writes them in as few syscalls as possible."""

    __slots__ = (
        "_backlog",
        "_drained",
        "_queue",
        "_wake",
        "broken",
        "closed",
        "dirty",
        "fd",
        "name",
    )

    def __init__(self, fd: int, name: str, dirty: list[Writer]) -> None:
        self.fd = fd
        self.name = name
        self.dirty = dirty  # shared list of writers with queued lines
        self._queue: list[bytes] = []
        self._backlog = bytearray()
        self._wake = trio.Event()
        self._drained = trio.Event()
        self._drained.set()
        self.broken = False
        self.closed = False

    def send(self, line: bytes) -> None:
        """Queue one line (without newline); it goes out at the next flush."""
        if not self._queue:
            self.dirty.append(self)
        self._queue.append(line)

    def flush(self) -> None:
        queue = self._queue
        if not queue:
            return
        queue.append(b"")
        data = b"\n".join(queue)
        queue.clear()
        if self.broken or self.closed:
            return
        if self._backlog:
            self._backlog += data
            return
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            written = 0
        except OSError:
            self.broken = True
            return
        if written < len(data):
            self._backlog += memoryview(data)[written:]
            self._drained = trio.Event()
            self._wake.set()

    @property
    def congested(self) -> bool:
        return len(self._backlog) > HIGH_WATER

    async def wait_drained(self) -> None:
        await self._drained.wait()

    async def drain_forever(self) -> None:
        """Background task: write whatever the pipe could not take at once."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._backlog and not self.broken:
                try:
                    await trio.lowlevel.wait_writable(self.fd)
                    written = os.write(self.fd, self._backlog)
                except BlockingIOError:
                    continue
                except (OSError, trio.ClosedResourceError):
                    self.broken = True
                    break
                del self._backlog[:written]
            if self.broken:
                self._backlog.clear()
            self._drained.set()

    @property
    def idle(self) -> bool:
        return not self._backlog and not self._queue


def flush_all(dirty: list[Writer]) -> None:
    """Flush every writer that has queued lines (one write per peer per burst)."""
    while dirty:
        writers = dirty[:]
        dirty.clear()
        for writer in writers:
            writer.flush()
