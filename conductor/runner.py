"""One running chain instance: the router wired to real pipes and processes.

Lifetimes are visible in `run`: one nursery holds the editor reader, every
component's reader, stderr forwarder and exit watcher, and the writers'
drain tasks. The first `initialize` starts the components (lazily); the first
of editor EOF, a signal, or a component's death ends the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from .chain import Chain
from .fdio import FdWriter, flush_all, read_lines
from .plugin_host import PluginHost
from .process import (
    ChildProcess,
    StderrSink,
    become_subreaper,
    kill_adopted_orphans,
    stop_processes,
)
from .router import Link, Router, SpawnError
from .trace import Tracer

log = logging.getLogger("conductor")

DEATH_REPORT_WAIT = 0.5  # how long to wait for a dying child's status and stderr


@attrs.define(eq=False)
class _Component:
    process: ChildProcess
    link: Link
    writer: FdWriter
    reported: bool = False


class _RouterTransport:
    """Carries an in-process plugin's messages into the router: Python objects, no JSON."""

    def __init__(self, runner: ChainRunner, link: Link) -> None:
        self.runner = runner
        self.link = link

    def send(self, to: str, message: dict[str, Any], raw: bytes | None) -> None:
        self.runner.router.receive_from_plugin(self.link, to, message, raw)
        flush_all(self.runner.dirty)
        if self.runner.trace is not None:
            self.runner.trace.flush()


def _no_bytes(line: bytes) -> None:
    raise AssertionError("an in-process plugin link was sent bytes")


class ChainRunner:
    """Runs `chain` for the editor on (`editor_in`, `editor_out`) until it ends."""

    def __init__(
        self,
        chain: Chain,
        editor_in: int = 0,
        editor_out: int = 1,
        *,
        grace: float = 2.0,
        reap_orphans: bool = False,
        trace: Tracer | None = None,
    ) -> None:
        self.chain = chain
        self.editor_in = editor_in
        self.grace = grace
        self.reap_orphans = reap_orphans
        self.dirty: list[FdWriter] = []
        self.editor_writer = FdWriter(editor_out, "editor", self.dirty)
        self.editor = Link("editor", self.editor_writer.send, is_proxy=False)
        self.router = Router(self.editor, chain.proxy_mode, self._start_components)
        self.router.trace = self.trace = trace
        self._wire_log = log.isEnabledFor(logging.DEBUG)
        if self._wire_log:
            self.editor.send = self._logged(self.editor_writer, "conductor -> editor")
        self.components: list[_Component] = []
        self.hosts: list[PluginHost] = []
        # Plugins are made before anything starts: a refusal stops the run right here.
        self.plugins = {c.name: c.make_plugin() for c in chain.proxies if c.plugin is not None}
        self.exit_code = 0
        self._done = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._stderr = StderrSink()
        self._closing = False
        self._editor_gone = False

    async def run(self) -> int:
        """Serve until the editor leaves, a signal arrives, or a component dies."""
        for fd in (self.editor_in, self.editor_writer.fd):
            os.set_blocking(fd, False)
        if self.reap_orphans:
            become_subreaper()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self.editor_writer.drain_forever)
                nursery.start_soon(self._read_editor)
                nursery.start_soon(self._watch_signals)
                await self._done.wait()
                await self._shutdown()
                nursery.cancel_scope.cancel()
        finally:
            for component in self.components:
                component.process.close_pipes()
            if self.trace is not None:
                self.trace.close()
            for fd in (self.editor_in, self.editor_writer.fd):
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, True)
        return self.exit_code

    # ------------------------------------------------------------ components

    def _start_components(self) -> list[Link]:
        """Spawn every component (called by the router on the first initialize)."""
        assert self._nursery is not None
        links = []
        for spec in self.chain.components:
            if spec.plugin is not None:
                link = Link(spec.name, _no_bytes, is_proxy=True)
                link.host = PluginHost(
                    self.plugins[spec.name], spec.name, _RouterTransport(self, link)
                )
                self._nursery.start_soon(link.host.run)
                links.append(link)
                continue
            try:
                process = ChildProcess(spec)
            except OSError as exc:
                # The editor gets the error; the chain cannot run half-started, so end it.
                log.error("%s; shutting the chain down", exc)
                self.exit_code = 1
                self._done.set()
                raise SpawnError(str(exc)) from None
            writer = FdWriter(process.stdin, spec.name, self.dirty)
            send = (
                self._logged(writer, f"conductor -> {spec.name}") if self._wire_log else writer.send
            )
            link = Link(spec.name, send, is_proxy=spec.role == "proxy", dialect=spec.dialect)
            component = _Component(process, link, writer)
            self.components.append(component)
            links.append(link)
            self._nursery.start_soon(writer.drain_forever)
            self._nursery.start_soon(self._read_component, component)
            self._nursery.start_soon(process.forward_stderr, self._stderr)
            self._nursery.start_soon(self._watch_component, component)
        return links

    async def _read_component(self, component: _Component) -> None:
        link = component.link
        await read_lines(component.process.stdout, lambda lines: self._deliver(link, lines))
        await self._component_down(component)

    async def _watch_component(self, component: _Component) -> None:
        await component.process.watch_exit()
        await self._component_down(component)

    async def _component_down(self, component: _Component) -> None:
        """A component closed its output or exited: report it, then end the chain."""
        link, process = component.link, component.process
        if component.reported or self._closing:
            return
        component.reported = True
        with trio.move_on_after(DEATH_REPORT_WAIT):
            await process.exited.wait()
            await process.stderr_done.wait()
        role = process.spec.role
        message = f"{role} {process.name!r} {process.describe_exit()}"
        cause: dict[str, Any] = {
            "message": message,
            "component": process.name,
            "exitStatus": process.returncode,
            "stderrTail": list(process.stderr_tail),
        }
        log.error("%s; shutting the chain down", message)
        self.router.link_failed(link, cause)
        self.router.fail_all(cause)
        flush_all(self.dirty)
        self.exit_code = 1
        self._done.set()

    # ---------------------------------------------------------------- editor

    async def _read_editor(self) -> None:
        await read_lines(self.editor_in, lambda lines: self._deliver(self.editor, lines))
        log.info("editor closed its input; shutting down")
        self._editor_gone = True
        self._done.set()

    @staticmethod
    def _logged(writer: FdWriter, label: str) -> Callable[[bytes], None]:
        """--log-level debug: every line out, with the peer it goes to."""

        def send(line: bytes) -> None:
            log.debug("%s: %s", label, line.decode("utf-8", "replace"))
            writer.send(line)

        return send

    def _deliver(self, link: Link, lines: list[bytes]) -> Awaitable[None] | None:
        receive = self.router.receive
        if self._wire_log:
            for line in lines:
                log.debug("%s -> conductor: %s", link.name, line.decode("utf-8", "replace"))
        for line in lines:
            receive(link, line)
        flush_all(self.dirty)
        if self.trace is not None:
            self.trace.flush()
        if (
            self.editor_writer.congested
            or any(c.writer.congested for c in self.components)
            or any(h.congested for h in self.hosts)
        ):
            return self._wait_for_room()
        return None

    async def _wait_for_room(self) -> None:
        """Back-pressure: stop reading while any peer has a full backlog."""
        for writer in [self.editor_writer, *(c.writer for c in self.components)]:
            if writer.congested:
                await writer.wait_drained()
        for host in self.hosts:
            if host.congested:
                await host.wait_room()

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                log.info("received %s; shutting down", signal.Signals(signum).name)
                self._done.set()
                return

    async def _shutdown(self) -> None:
        flush_all(self.dirty)
        with trio.CancelScope(shield=True):
            if self._editor_gone and self.exit_code == 0:
                # The editor stopped writing but may still read: let what it asked finish.
                with trio.move_on_after(self.grace):
                    while self.editor.incoming and self.exit_code == 0:
                        await trio.sleep(0.01)
            self._closing = True
            await stop_processes([c.process for c in self.components], grace=self.grace)
            if self.reap_orphans:
                kill_adopted_orphans()
            self.router.fail_all(
                {
                    "message": "the chain shut down before answering this request",
                    "component": "conductor",
                }
            )
            with trio.move_on_after(1.0):
                flush_all(self.dirty)
                if not self.editor_writer.idle:
                    await self.editor_writer.wait_drained()
