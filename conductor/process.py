"""Child processes of the chain: spawning, exit, and a clean kill.

Each child runs in its own process group so that the whole group (its own
children included) can be terminated at shutdown. On Linux the conductor is
also a child subreaper, so grandchildren orphaned by a dying child are
re-parented to it and can still be found and killed.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

import trio

from .chain import ComponentSpec

log = logging.getLogger("conductor")

STDERR_TAIL_LINES = 20
TAG_VARIABLE = "ACP_CONDUCTOR_CHAIN"
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt orphaned descendants (Linux), so none can outlive the conductor unseen."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        log.debug("could not become a child subreaper")


class ChildProcess:
    """One spawned component with pipes on stdin, stdout and stderr."""

    def __init__(self, spec: ComponentSpec, tag: str | None = None, label: str = "") -> None:
        self.spec = spec
        self.name = spec.name
        self.label = label  # prefixes forwarded stderr lines, e.g. the served connection
        env = None
        if spec.env or tag is not None:
            env = {**os.environ, **spec.env}
            if tag is not None:
                # Inherited by every descendant: lets `serve` find this chain's orphans.
                env[TAG_VARIABLE] = tag
        try:
            self.popen = subprocess.Popen(
                spec.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=spec.cwd,
                bufsize=0,
                close_fds=True,
                process_group=0,
            )
        except OSError as exc:
            raise OSError(
                f"cannot start {spec.role} {spec.name!r} ({spec.command[0]}): {exc.strerror or exc}"
            ) from exc
        assert self.popen.stdin and self.popen.stdout and self.popen.stderr
        self.stdin = self.popen.stdin.fileno()
        self.stdout = self.popen.stdout.fileno()
        self.stderr = self.popen.stderr.fileno()
        for fd in (self.stdin, self.stdout, self.stderr):
            os.set_blocking(fd, False)
        self.pid = self.popen.pid
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.exited = trio.Event()
        self.stderr_done = trio.Event()
        self.returncode: int | None = None
        log.info(
            "started %s %r (pid %d): %s", spec.role, spec.name, self.pid, " ".join(spec.command)
        )

    async def watch_exit(self) -> None:
        """Wait for the process to exit and record its status (a pidfd: no polling)."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            pidfd = None
        try:
            if pidfd is not None:
                await trio.lowlevel.wait_readable(pidfd)
            else:
                while self.popen.poll() is None:
                    await trio.sleep(0.05)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        self.returncode = self.popen.wait()
        log.info("%s %r exited with status %s", self.spec.role, self.name, self.returncode)
        self.exited.set()

    def describe_exit(self) -> str:
        code = self.returncode
        if code is None:
            return "closed its output"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def close_stdin(self) -> None:
        """Close the child's stdin (its end of file); whoever wrote to it has stopped."""
        assert self.popen.stdin is not None
        with contextlib.suppress(OSError):
            self.popen.stdin.close()

    def signal_group(self, signum: int) -> None:
        """Signal the child's whole process group (its own children included)."""
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            if self.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signum)

    def close_pipes(self) -> None:
        """Close our ends of the child's pipes (nothing watches them any more)."""
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


async def stop_processes(
    children: Iterable[ChildProcess], grace: float = 2.0, term_grace: float = 1.0
) -> None:
    """Close stdin, wait `grace`, SIGTERM the groups, wait, then SIGKILL whatever is left."""
    children = list(children)
    for child in children:
        child.close_stdin()
    with trio.move_on_after(grace):
        for child in children:
            await child.exited.wait()
    running = [c for c in children if not c.exited.is_set()]
    for child in children:
        # Also reaches grandchildren left in the group by a child that exited.
        child.signal_group(signal.SIGTERM)
    if running:
        log.info("terminating %s", ", ".join(c.name for c in running))
        with trio.move_on_after(term_grace):
            for child in running:
                await child.exited.wait()
    for child in children:
        child.signal_group(signal.SIGKILL)
    with trio.move_on_after(term_grace):
        for child in children:
            await child.exited.wait()


def kill_adopted_orphans(tag: str | None = None) -> None:
    """Kill and reap descendants that were re-parented to us (we are their subreaper).

    Without `tag`, every remaining child goes: right for `run`, which has one
    chain and has stopped it. `serve` runs many chains in one process, so it
    passes the chain's tag and only children carrying it in their environment
    (inherited from a component spawned with that tag) are killed.
    """
    if not sys.platform.startswith("linux"):
        return
    me = os.getpid()
    marker = None if tag is None else f"{TAG_VARIABLE}={tag}".encode()
    targets = [pid for pid in _children_of(me) if marker is None or _has_env(pid, marker)]
    for pid in targets:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 0.5  # SIGKILL is quick; reap so no zombie stays with us
    for pid in targets:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.005)


def reap_exited_orphans(keep: set[int]) -> None:
    """Reap adopted descendants that exited on their own (a long-lived `serve` collects them).

    `keep` are our components' pids: their Popen objects reap them.
    """
    if not sys.platform.startswith("linux"):
        return
    for pid in _children_of(os.getpid()):
        if pid not in keep:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _has_env(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False


def _children_of(parent: int) -> list[int]:
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    if int(fields[1]) == parent:
                        pids.append(int(entry))
                except (OSError, IndexError, ValueError):
                    continue
        return pids
