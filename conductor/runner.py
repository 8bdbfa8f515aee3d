"""One running chain instance: the router wired to real pipes and processes.

Lifetimes are visible in `run`: one nursery holds the editor reader, every
component's reader, stderr forwarder and exit watcher (or, for a remote
component, its WebSocket), and the writers' drain tasks. The first
`initialize` starts the components (lazily); the first of the editor leaving,
a signal, or a component's death (or hang-up) ends the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from . import wsio
from .chain import Chain, ComponentSpec
from .fdio import FdWriter, Writer, flush_all, read_lines
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


Deliver = Callable[[list[bytes]], Awaitable[None] | None]


class EditorEnd(Protocol):
    """The editor's side of one chain: stdio for `run`, a WebSocket for `serve`."""

    # True when the editor may still read after it stops writing (a pipe's half close):
    # the runner then lets requests in flight finish before it stops the chain.
    half_close: bool

    def make_writer(self, dirty: list[Writer]) -> Writer:
        """The writer for lines to the editor (created once, sharing the runner's dirty list)."""
        ...

    def prepare(self) -> None: ...

    def restore(self) -> None: ...

    async def read(self, deliver: Deliver) -> str:
        """Hand the editor's lines to `deliver` until it is gone; say why it went."""
        ...

    async def finish(self, runner: ChainRunner) -> None:
        """The chain has stopped and its last lines are out: close the editor's side."""
        ...


class StdioEditor:
    """The editor on two file descriptors (an editor-launched `conductor run`)."""

    half_close = True

    def __init__(self, fd_in: int = 0, fd_out: int = 1) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out

    def make_writer(self, dirty: list[Writer]) -> Writer:
        return FdWriter(self.fd_out, "editor", dirty)

    def prepare(self) -> None:
        for fd in (self.fd_in, self.fd_out):
            os.set_blocking(fd, False)

    def restore(self) -> None:
        for fd in (self.fd_in, self.fd_out):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, True)

    async def read(self, deliver: Deliver) -> str:
        await read_lines(self.fd_in, deliver)
        return "the editor closed its input"

    async def finish(self, runner: ChainRunner) -> None:
        return None


@attrs.define(eq=False)
class _Component:
    process: ChildProcess
    link: Link
    writer: FdWriter
    reported: bool = False


@attrs.define(eq=False)
class _Remote:
    """A component served elsewhere, reached over a WebSocket we open."""

    spec: ComponentSpec
    link: Link
    writer: wsio.WsWriter
    ws: wsio.WebSocketConnection | None = None
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
    """Runs `chain` for one editor until it ends.

    `run` passes the default stdio editor and owns the process (signals,
    subreaper); `serve` passes a WebSocket editor per connection, a `tag` that
    marks the chain's processes, and handles signals itself.
    """

    def __init__(
        self,
        chain: Chain,
        editor: EditorEnd | None = None,
        *,
        grace: float = 2.0,
        reap_orphans: bool = False,
        trace: Tracer | None = None,
        watch_signals: bool = True,
        tag: str | None = None,
        label: str = "",
    ) -> None:
        self.chain = chain
        self.editor_end: EditorEnd = editor if editor is not None else StdioEditor()
        self.grace = grace
        self.reap_orphans = reap_orphans
        self.watch_signals = watch_signals
        self.tag = tag
        self.label = label
        self.dirty: list[Writer] = []
        self.editor_writer = self.editor_end.make_writer(self.dirty)
        self.editor = Link("editor", self.editor_writer.send, is_proxy=False)
        self.router = Router(self.editor, chain.proxy_mode, self._start_components)
        self.router.trace = self.trace = trace
        self._wire_log = log.isEnabledFor(logging.DEBUG)
        if self._wire_log:
            self.editor.send = self._logged(self.editor_writer, "conductor -> editor")
        self.components: list[_Component] = []
        self.remotes: list[_Remote] = []
        self.component_writers: list[Writer] = []
        self.hosts: list[PluginHost] = []
        # Plugins are made before anything starts: a refusal stops the run right here.
        self.plugins = {c.name: c.make_plugin() for c in chain.proxies if c.plugin is not None}
        self.exit_code = 0
        self.end = ""  # why the run ended, in words (a served connection's close reason)
        self._done = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._stderr = StderrSink()
        self._closing = False
        self._editor_gone = False

    async def run(self) -> int:
        """Serve until the editor leaves, a signal arrives, or a component dies."""
        self.editor_end.prepare()
        if self.reap_orphans:
            become_subreaper()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self.editor_writer.drain_forever)
                nursery.start_soon(self._read_editor)
                if self.watch_signals:
                    nursery.start_soon(self._watch_signals)
                await self._done.wait()
                await self._shutdown()
                nursery.cancel_scope.cancel()
        finally:
            for component in self.components:
                component.process.close_pipes()
            if self.trace is not None:
                self.trace.close()
            self.editor_end.restore()
        return self.exit_code

    def stop(self, why: str) -> None:
        """End the run from outside (a served connection's server is shutting down)."""
        if not self._done.is_set():
            self.end = why
            self._done.set()

    # ------------------------------------------------------------ components

    def _start_components(self) -> list[Link]:
        """Spawn every component (called by the router on the first initialize)."""
        assert self._nursery is not None
        links = []
        for spec in self.chain.components:
            if spec.url is not None:
                links.append(self._start_remote(spec))
                continue
            if spec.plugin is not None:
                link = Link(spec.name, _no_bytes, is_proxy=True)
                link.host = PluginHost(
                    self.plugins[spec.name], spec.name, _RouterTransport(self, link)
                )
                self._nursery.start_soon(link.host.run)
                links.append(link)
                continue
            try:
                process = ChildProcess(spec, self.tag, self.label)
            except OSError as exc:
                # The editor gets the error; the chain cannot run half-started, so end it.
                log.error("%s%s; shutting the chain down", self.label, exc)
                self.exit_code = 1
                self.end = str(exc)
                self._done.set()
                raise SpawnError(str(exc)) from None
            writer = FdWriter(process.stdin, spec.name, self.dirty)
            send = (
                self._logged(writer, f"conductor -> {spec.name}") if self._wire_log else writer.send
            )
            link = Link(spec.name, send, is_proxy=spec.role == "proxy", dialect=spec.dialect)
            component = _Component(process, link, writer)
            self.components.append(component)
            self.component_writers.append(writer)
            links.append(link)
            self._nursery.start_soon(writer.drain_forever)
            self._nursery.start_soon(self._read_component, component)
            self._nursery.start_soon(process.forward_stderr, self._stderr)
            self._nursery.start_soon(self._watch_component, component)
        return links

    def _start_remote(self, spec: ComponentSpec) -> Link:
        """A remote component: its link queues frames until the connection opens."""
        assert self._nursery is not None
        writer = wsio.WsWriter(spec.name, self.dirty)
        send = self._logged(writer, f"conductor -> {spec.name}") if self._wire_log else writer.send
        link = Link(spec.name, send, is_proxy=spec.role == "proxy", dialect=spec.dialect)
        remote = _Remote(spec, link, writer)
        self.remotes.append(remote)
        self.component_writers.append(writer)
        self._nursery.start_soon(writer.drain_forever)
        self._nursery.start_soon(self._run_remote, remote)
        return link

    async def _run_remote(self, remote: _Remote) -> None:
        spec = remote.spec
        assert spec.url is not None
        shown = wsio.public_url(spec.url)
        close: wsio.CloseReason | None = None
        try:
            async with wsio.connection(spec.url, spec.headers) as ws:
                remote.ws = ws
                remote.writer.attach(ws)
                log.info("%sconnected %s %r to %s", self.label, spec.role, spec.name, shown)
                await wsio.read_frames(ws, lambda lines: self._deliver(remote.link, lines))
                close = ws.closed
                why = f"closed the connection ({wsio.describe_close(close)})"
        except wsio.ConnectError as exc:
            why = f"cannot connect: {exc}"
        self._remote_down(remote, why, close)

    def _remote_down(self, remote: _Remote, why: str, close: wsio.CloseReason | None) -> None:
        """A remote component is unreachable or hung up: the same path as a dying process."""
        if remote.reported or self._closing:
            return
        remote.reported = True
        spec = remote.spec
        assert spec.url is not None
        url = wsio.public_url(spec.url)
        message = f"{spec.role} {spec.name!r} ({url}) {why}"
        cause: dict[str, Any] = {
            "message": message,
            "component": spec.name,
            "url": url,
            "closeCode": None if close is None else close.code,
            "closeReason": None if close is None else close.reason,
        }
        self._fail_chain(remote.link, cause)

    def _fail_chain(self, link: Link, cause: dict[str, Any]) -> None:
        log.error("%s%s; shutting the chain down", self.label, cause["message"])
        self.router.link_failed(link, cause)
        self.router.fail_all(cause)
        flush_all(self.dirty)
        self.exit_code = 1
        self.end = cause["message"]
        self._done.set()

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
        self._fail_chain(link, cause)

    # ---------------------------------------------------------------- editor

    async def _read_editor(self) -> None:
        why = await self.editor_end.read(lambda lines: self._deliver(self.editor, lines))
        log.info("%s%s; shutting down", self.label, why)
        self._editor_gone = True
        if not self._done.is_set():
            self.end = why
        self._done.set()

    @staticmethod
    def _logged(writer: Writer, label: str) -> Callable[[bytes], None]:
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
            or any(w.congested for w in self.component_writers)
            or any(h.congested for h in self.hosts)
        ):
            return self._wait_for_room()
        return None

    async def _wait_for_room(self) -> None:
        """Back-pressure: stop reading while any peer has a full backlog."""
        for writer in [self.editor_writer, *self.component_writers]:
            if writer.congested:
                await writer.wait_drained()
        for host in self.hosts:
            if host.congested:
                await host.wait_room()

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                log.info("received %s; shutting down", name)
                self.stop(f"received {name}")
                return

    async def _shutdown(self) -> None:
        flush_all(self.dirty)
        with trio.CancelScope(shield=True):
            if self._editor_gone and self.exit_code == 0 and self.editor_end.half_close:
                # The editor stopped writing but may still read: let what it asked finish.
                with trio.move_on_after(self.grace):
                    while self.editor.incoming and self.exit_code == 0:
                        await trio.sleep(0.01)
            self._closing = True
            async with trio.open_nursery() as closing:
                for remote in self.remotes:
                    if remote.ws is not None:
                        closing.start_soon(self._close_remote, remote.ws)
                await stop_processes([c.process for c in self.components], grace=self.grace)
            if self.reap_orphans:
                kill_adopted_orphans()
            elif self.tag is not None:
                kill_adopted_orphans(self.tag)
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
            await self.editor_end.finish(self)

    @staticmethod
    async def _close_remote(ws: wsio.WebSocketConnection) -> None:
        """Say goodbye to a remote component with a close frame (it stops its own chain)."""
        with trio.move_on_after(2.0):
            await ws.aclose(1000, "the chain is shutting down")
