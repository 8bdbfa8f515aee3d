"""The process's event loop: one `select.epoll` over the pipes, with trio as its guest.

The data plane (every pipe of every chain, and the router they feed) runs
here, on the main thread: a burst of input costs one epoll wait and a few
system calls, not a trio scheduler pass per wake-up. Everything else (spawning
and watching processes, signals, timers, WebSockets, plugin hooks that await)
is trio code, run in guest mode: trio waits for its own I/O in a helper thread
and hands each of its scheduler ticks to this loop to run, so trio tasks and
the router share one thread and never race.

Code running in a trio task may call the loop and the router directly. Code
running in a loop callback (a pipe handler) reaches trio through
`trio.lowlevel.TrioToken.run_sync_soon`; the `Loop.call_soon_trio` helper
does that.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

__all__ = ["Handler", "Loop", "current_loop", "run"]

_IN = select.EPOLLIN
_OUT = select.EPOLLOUT


class Handler(Protocol):
    """Something watching one file descriptor."""

    def on_events(self, mask: int) -> None: ...


class Flusher(Protocol):
    def flush(self) -> None: ...


class Loop:
    """Waits on file descriptors and runs what became ready, then flushes what was written."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._wake, _IN)
        self._handlers: dict[int, Handler] = {}
        self._masks: dict[int, int] = {}
        # Files epoll cannot watch (regular files), read on every pass while wanted.
        self._always_ready: dict[int, Handler] = {}
        self._parked: dict[int, Handler] = {}
        self._callbacks: collections.deque[Callable[[], object]] = collections.deque()
        self.dirty: list[Flusher] = []  # writers with queued output, flushed once per pass
        self._token: trio.lowlevel.TrioToken | None = None
        self._outcome: Any = None  # trio's Outcome of the run, once it is over

    # --------------------------------------------------------------- watching

    def watch(
        self, fd: int, handler: Handler, readable: bool = False, writable: bool = False
    ) -> bool:
        """Watch `fd`; False if epoll cannot (a regular file: it is then treated as always
        ready while it is watched for reading)."""
        mask = (_IN if readable else 0) | (_OUT if writable else 0)
        try:
            self._epoll.register(fd, mask)
        except PermissionError:
            (self._always_ready if readable else self._parked)[fd] = handler
            return False
        self._handlers[fd] = handler
        self._masks[fd] = mask
        return True

    def modify(self, fd: int, readable: bool, writable: bool) -> None:
        """Change what `fd` is watched for (hang-ups and errors are always reported)."""
        mask = (_IN if readable else 0) | (_OUT if writable else 0)
        if fd in self._masks:
            if self._masks[fd] != mask:
                self._masks[fd] = mask
                self._epoll.modify(fd, mask)
        elif readable and fd in self._parked:
            self._always_ready[fd] = self._parked.pop(fd)
        elif not readable and fd in self._always_ready:
            self._parked[fd] = self._always_ready.pop(fd)

    def forget(self, fd: int) -> None:
        """Stop watching `fd` (before it is closed)."""
        self._always_ready.pop(fd, None)
        self._parked.pop(fd, None)
        if self._handlers.pop(fd, None) is not None:
            del self._masks[fd]
            try:
                self._epoll.unregister(fd)
            except OSError as exc:
                if exc.errno not in (errno.EBADF, errno.ENOENT):
                    raise

    # -------------------------------------------------------------- callbacks

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run `fn` in this loop's next pass (from this thread)."""
        self._callbacks.append(fn)

    def call_soon_threadsafe(self, fn: Callable[[], object]) -> None:
        """Run `fn` in this loop's next pass (from any thread)."""
        self._callbacks.append(fn)
        os.eventfd_write(self._wake, 1)

    def call_soon_trio(self, fn: Callable[..., object], *args: Any) -> None:
        """Run `fn(*args)` soon in trio's context (from a loop callback or a trio task)."""
        assert self._token is not None
        self._token.run_sync_soon(fn, *args)

    # ----------------------------------------------------------------- running

    def run(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run `async_fn(*args)` under trio (as this loop's guest) until it returns."""

        async def main() -> Any:
            self._token = trio.lowlevel.current_trio_token()
            _CURRENT.set(self)
            return await async_fn(*args)

        trio.lowlevel.start_guest_run(
            main,
            run_sync_soon_threadsafe=self.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self.call_soon,
            done_callback=self._done,
        )
        try:
            while self._outcome is None:
                self._pass()
        finally:
            self._epoll.close()
            os.close(self._wake)
        return self._outcome.unwrap()

    def _done(self, result: Any) -> None:
        self._outcome = result

    def _pass(self) -> None:
        """One pass: wait for readiness, handle it, run callbacks, flush writers."""
        timeout = 0 if self._callbacks or self._always_ready else -1
        events = self._epoll.poll(timeout)
        handlers = self._handlers
        for fd, mask in events:
            handler = handlers.get(fd)
            if handler is not None:
                handler.on_events(mask)
            elif fd == self._wake:
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._wake)
        if self._always_ready:
            for handler in list(self._always_ready.values()):
                handler.on_events(_IN)
        if self.dirty:
            self.flush()
        callbacks = self._callbacks
        for _ in range(len(callbacks)):
            callbacks.popleft()()
        if self.dirty:
            self.flush()

    def flush(self) -> None:
        """Write out everything queued (one write per peer per pass)."""
        dirty = self.dirty
        while dirty:
            writers = dirty[:]
            dirty.clear()
            for writer in writers:
                writer.flush()


def run(async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """`trio.run`, with the process's pipes served by a `Loop` (made here)."""
    return Loop().run(async_fn, *args)


_CURRENT: trio.lowlevel.RunVar[Loop] = trio.lowlevel.RunVar("conductor.loop")


def current_loop() -> Loop:
    """The loop serving this trio run's pipes (inside `run`)."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("conductor.loop.run() is not running") from None
