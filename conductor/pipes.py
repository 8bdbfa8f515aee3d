"""Pipes on the loop: a peer's output read as lines, its input written in bursts.

A `PipeReader` hands each burst of complete lines to the router, inside a
flow-control burst of its peer, and stops reading while flow control pauses
the peer (a hang-up is still noticed). A `PipeWriter` queues lines and writes
them with one `os.write` per loop pass; what the pipe cannot take yet waits in
a backlog written as the pipe drains. A `StderrReader` forwards a component's
diagnostics line by line (long lines in pieces) and never pauses.
"""

from __future__ import annotations

import collections
import logging
import os
import select
from collections.abc import Callable

from .flow import Flow, Peer
from .framing import LineSplitter, TextLines
from .loop import Loop

log = logging.getLogger("conductor")

__all__ = ["CHUNK", "PipeReader", "PipeWriter", "StderrReader", "StderrSink"]

CHUNK = 1 << 16  # below glibc's mmap threshold: a read never costs an mmap/munmap pair
_IN = select.EPOLLIN
_OUT = select.EPOLLOUT
_GONE = select.EPOLLHUP | select.EPOLLERR


class PipeReader:
    """Reads one peer's output until end of file, delivering complete lines."""

    __slots__ = (
        "_hung_up",
        "_splitter",
        "closed",
        "deliver",
        "fd",
        "flow",
        "loop",
        "name",
        "on_eof",
        "peer",
    )

    def __init__(
        self,
        loop: Loop,
        fd: int,
        name: str,
        peer: Peer,
        flow: Flow,
        deliver: Callable[[list[bytes]], None],
        on_eof: Callable[[], None],
    ) -> None:
        self.loop = loop
        self.fd = fd
        self.name = name
        self.peer = peer
        self.flow = flow
        self.deliver = deliver
        self.on_eof = on_eof
        self._splitter = LineSplitter()
        self._hung_up = False
        self.closed = False
        peer.on_pause = self._pause
        peer.on_resume = self._resume
        loop.watch(fd, self, readable=not peer.paused)

    def on_events(self, mask: int) -> None:
        if mask & _IN or not self.peer.paused:
            self._read()
        elif mask & _GONE:
            # Hung up while paused: stop hearing about it, and read what is left on resume.
            self._hung_up = True
            self.loop.forget(self.fd)

    def _pause(self) -> None:
        if not self.closed and not self._hung_up:
            self.loop.modify(self.fd, readable=False, writable=False)

    def _resume(self) -> None:
        if self.closed:
            return
        if self._hung_up:
            self._hung_up = False
            self.loop.watch(self.fd, self, readable=True)
        else:
            self.loop.modify(self.fd, readable=True, writable=False)

    def _read(self) -> None:
        fd, splitter, flow, peer = self.fd, self._splitter, self.flow, self.peer
        for _ in range(8):  # a busy peer gets a few reads per pass, then the others get theirs
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._end()
                return
            lines = splitter.feed(data)
            if splitter.dropped:
                splitter.dropped = 0
                log.warning(
                    "%s wrote a line longer than %d bytes (dropped)", self.name, splitter.limit
                )
            if lines:
                previous = flow.begin(peer)
                try:
                    self.deliver(lines)
                finally:
                    flow.end(previous)
            if len(data) < CHUNK or peer.waits_on or peer.holds or self.closed:
                return

    def _end(self) -> None:
        self.close()
        tail = self._splitter.leftover
        if tail.strip():
            previous = self.flow.begin(self.peer)
            try:
                self.deliver([tail])
            finally:
                self.flow.end(previous)
        self.on_eof()

    def close(self) -> None:
        """Stop reading (the fd is the caller's to close)."""
        if not self.closed:
            self.closed = True
            self.loop.forget(self.fd)


class PipeWriter:
    """Queues lines for one peer and writes them in as few system calls as possible."""

    __slots__ = (
        "_backlog",
        "_dirty",
        "_live",
        "_mid_line",
        "_queue",
        "broken",
        "closed",
        "fd",
        "flow",
        "loop",
        "name",
        "on_broken",
        "peer",
    )

    def __init__(self, loop: Loop, fd: int, name: str, peer: Peer, flow: Flow) -> None:
        self.loop = loop
        self.fd = fd
        self.name = name
        self.peer = peer
        self.flow = flow
        self._queue: list[bytes] = []
        self._backlog = bytearray()
        self._dirty = False
        self._live = True  # neither broken nor closed
        self._mid_line = False  # the pipe has part of a line whose rest waits in the backlog
        self.broken = False
        self.closed = False
        self.on_broken: Callable[[], None] = lambda: None
        # Watched for nothing but errors: a reader that goes away is noticed at once.
        loop.watch(fd, self)

    def send(self, line: bytes) -> None:
        """Queue one line (without its newline); it goes out when the loop pass ends."""
        if not self._live:
            return
        self._queue.append(line)
        if not self._dirty:
            self._dirty = True
            self.loop.dirty.append(self)
        self.flow.wrote(self.peer, len(line) + 1)

    def flush(self) -> None:
        self._dirty = False
        queue = self._queue
        if not queue or self.broken:
            queue.clear()
            return
        queue.append(b"")
        data = b"\n".join(queue)
        queue.clear()
        if self._backlog:
            self._backlog += data
            return
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            written = 0
        except OSError:
            self._break()
            return
        if written:
            self._mid_line = data[written - 1] != 0x0A
            self.flow.sent(self.peer, written)
        if written < len(data):
            self._backlog += memoryview(data)[written:]
            self.loop.modify(self.fd, readable=False, writable=True)

    def on_events(self, mask: int) -> None:
        if mask & _OUT and self._backlog:
            try:
                written = os.write(self.fd, self._backlog)
            except BlockingIOError:
                return
            except OSError:
                self._break()
                return
            self._mid_line = self._backlog[written - 1] != 0x0A
            del self._backlog[:written]
            if not self._backlog:
                self.loop.modify(self.fd, readable=False, writable=False)
            self.flow.sent(self.peer, written)
        elif mask & _GONE:
            self._break()

    @property
    def idle(self) -> bool:
        return not self._backlog and not self._queue

    def end_line(self) -> None:
        """Keep only the rest of the line the pipe has part of (shutting down: what was not
        started is dropped, what was is finished)."""
        dropped = sum(len(line) + 1 for line in self._queue)
        self._queue.clear()
        backlog = self._backlog
        cut = backlog.find(b"\n") + 1 if self._mid_line else 0
        dropped += len(backlog) - cut
        del backlog[cut:]
        if dropped:
            self.flow.sent(self.peer, dropped)

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    def _break(self) -> None:
        if self.broken:
            return
        self.broken = True
        self._live = False
        self._backlog.clear()
        self._queue.clear()
        self.loop.forget(self.fd)
        self.flow.gone(self.peer)
        self.on_broken()

    def close(self) -> None:
        """Write nothing more (the fd is the caller's to close)."""
        if not self.closed:
            self.closed = True
            self._live = False
            self._queue.clear()
            self._backlog.clear()
            self.loop.forget(self.fd)
            self.flow.gone(self.peer)


class StderrSink:
    """Writes lines to our stderr. A blocked stderr must never stall routing, so lines are
    written without blocking and dropped (with a count) when it is full."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self.dropped = 0

    def write(self, data: bytes) -> None:
        try:
            os.write(self.fd, data)
        except BlockingIOError:
            self.dropped += 1
        except OSError:
            pass


class StderrReader:
    """Forwards a component's stderr to ours, a line at a time, prefixed with its name, and
    keeps the last lines for the report if it dies."""

    __slots__ = ("_lines", "closed", "fd", "loop", "on_eof", "prefix", "sink", "tail")

    def __init__(
        self,
        loop: Loop,
        fd: int,
        prefix: str,
        sink: StderrSink,
        tail: collections.deque[str],
        on_eof: Callable[[], None],
    ) -> None:
        self.loop = loop
        self.fd = fd
        self.prefix = prefix.encode()
        self.sink = sink
        self.tail = tail
        self.on_eof = on_eof
        self._lines = TextLines()
        self.closed = False
        loop.watch(fd, self, readable=True)

    def on_events(self, mask: int) -> None:
        try:
            data = os.read(self.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._forward(self._lines.finish())
            self.close()
            self.on_eof()
            return
        self._forward(self._lines.feed(data))

    def _forward(self, lines: list[bytes]) -> None:
        if not lines:
            return
        out = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            self.tail.append(line.decode("utf-8", "replace"))
            out.append(self.prefix + line + b"\n")
        self.sink.write(b"".join(out))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.forget(self.fd)
