"""Flow control per destination: bounded buffers that never deadlock the chain.

Every party the conductor reads from or writes to is a `Peer`. Bytes routed
to a peer wait in its backlog until it takes them. A source (the peer whose
messages are being routed) pauses only while a destination it has written to
in that burst holds more than the high-water mark, and resumes when every such
destination is down to the low-water mark. Nothing else pauses it: a slow
agent throttles the editor, not the proxy whose output must keep moving.

Pausing can itself deadlock a chain: a component that is blocked writing to us
stops reading, so if the destination a source waits on is (through other
paused peers) waiting on that very source, nobody moves again. Components are
assumed to be such blocking peers; the editor is assumed to read whatever it
is sent (an editor that does not is stuck whatever we do). Before pausing,
the wait-for graph is checked, and a pause that would close a cycle of
blocking peers is not taken: the destination's backlog then grows, bounded by
the work already admitted, since the source that feeds new work (the editor)
is paused. A hard limit pauses regardless, so memory stays bounded even
against peers that misbehave.

This module does no I/O: the transport layer calls `begin`/`end` around each
burst it routes, `wrote`/`sent` as backlogs change, and acts on `pause` and
`resume` callbacks.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["HARD_LIMIT", "HIGH_WATER", "LOW_WATER", "Flow", "Peer"]

HIGH_WATER = 2 << 20  # bytes waiting for one peer before the sources feeding it pause
LOW_WATER = HIGH_WATER // 4  # ... and the backlog at which they resume
HARD_LIMIT = 64 << 20  # beyond this, pause even at the risk of a deadlock


def _nothing() -> None:
    return None


Burst = tuple["Peer | None", "list[Peer] | None"]  # the state `Flow.begin` saves


class Peer:
    """One party of the chain as flow control sees it: a backlog toward it (sink side) and
    the reading of its messages (source side)."""

    __slots__ = (
        "backlog",
        "blocking",
        "holds",
        "name",
        "on_pause",
        "on_resume",
        "waiters",
        "waits_on",
    )

    def __init__(self, name: str, blocking: bool = True) -> None:
        self.name = name
        self.blocking = blocking  # may stop reading while it is blocked writing to us
        self.backlog = 0  # bytes routed to it that it has not taken yet
        self.waiters: set[Peer] = set()  # sources paused until this backlog drains
        self.waits_on: set[Peer] = set()  # congested destinations this source waits for
        self.holds = 0  # other reasons it must not be read (e.g. the chain is starting)
        self.on_pause: Callable[[], None] = _nothing
        self.on_resume: Callable[[], None] = _nothing

    @property
    def paused(self) -> bool:
        return bool(self.waits_on) or self.holds > 0

    def hold(self) -> None:
        """Stop reading this peer for a reason of the caller's (balanced by `release`)."""
        was = self.paused
        self.holds += 1
        if not was:
            self.on_pause()

    def release(self) -> None:
        self.holds -= 1
        if not self.paused:
            self.on_resume()

    def __repr__(self) -> str:
        return f"<Peer {self.name} backlog={self.backlog}>"


class Flow:
    """The flow-control state of one process: which sources wait for which destinations."""

    __slots__ = ("_touched", "current", "refused")

    def __init__(self) -> None:
        self.current: Peer | None = None  # the source whose messages are being routed
        self._touched: list[Peer] | None = None  # congested destinations written in this burst
        self.refused = 0  # pauses not taken because they would have deadlocked (a statistic)

    def begin(self, source: Peer | None) -> Burst:
        """Messages from `source` are being routed; returns what `end` restores (a burst may
        happen inside another's: each is charged to its own source)."""
        outer = (self.current, self._touched)
        self.current = source
        self._touched = None
        return outer

    def end(self, outer: Burst | None = None) -> None:
        """The burst is over: pause its source on each congested destination it fed."""
        source, touched = self.current, self._touched
        self.current, self._touched = outer if outer is not None else (None, None)
        if not touched or source is None:
            return
        for sink in touched:
            if sink.backlog > HIGH_WATER and sink not in source.waits_on:
                self._pause(source, sink)

    def wrote(self, sink: Peer, size: int) -> None:
        """`size` bytes were queued for `sink`."""
        sink.backlog += size
        if sink.backlog > HIGH_WATER and self.current is not None:
            if self._touched is None:
                self._touched = [sink]
            else:
                self._touched.append(sink)

    def sent(self, sink: Peer, size: int) -> None:
        """`sink` took `size` bytes of its backlog."""
        sink.backlog -= size
        if sink.waiters and sink.backlog <= LOW_WATER:
            self._drained(sink)

    def gone(self, peer: Peer) -> None:
        """`peer` will take nothing more: its backlog is dropped, and nobody waits for it."""
        peer.backlog = 0
        if peer.waiters:
            self._drained(peer)

    def _drained(self, sink: Peer) -> None:
        waiters = list(sink.waiters)
        sink.waiters.clear()
        for source in waiters:
            source.waits_on.discard(sink)
            if not source.paused:
                source.on_resume()

    def _pause(self, source: Peer, sink: Peer) -> None:
        if sink.backlog <= HARD_LIMIT and self._would_deadlock(source, sink):
            self.refused += 1
            return
        was = source.paused
        source.waits_on.add(sink)
        sink.waiters.add(source)
        if not was:
            source.on_pause()

    @staticmethod
    def _would_deadlock(source: Peer, sink: Peer) -> bool:
        """Whether `sink` drains only once `source` is read again (a cycle of blocking peers)."""
        if not source.blocking:
            return False
        todo, seen = [sink], set()
        while todo:
            peer = todo.pop()
            if peer is source:
                return True
            if not peer.blocking or peer in seen:
                continue
            seen.add(peer)
            todo.extend(peer.waits_on)
        return False
