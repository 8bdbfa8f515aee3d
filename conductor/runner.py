"""One running chain instance: the router wired to real pipes, processes and sockets.

The pipes are served by the process's `Loop` (see `loop`), which feeds the
router directly; this module is the control plane, in trio. Lifetimes are
visible in `run`: one nursery holds the signal watcher, the editor's reader
(a WebSocket's) and every component's exit watcher, remote connection and
in-process plugin task. The router's `START_CHAIN` effect (the first valid
`initialize`) starts the components in that nursery; the first of the editor
leaving, a signal, or a component's death (or hang-up) ends the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from . import wsio
from .chain import Chain, ComponentSpec
from .flow import Flow, Peer
from .links import ByteLink, Link, PluginLink
from .loop import Loop, current_loop
from .pipes import PipeReader, PipeWriter, StderrReader, StderrSink
from .plugin_host import PluginHost
from .process import ChildProcess, become_subreaper, kill_adopted_orphans, stop_processes
from .router import START_CHAIN, Router
from .trace import Tracer

log = logging.getLogger("conductor")

__all__ = ["ChainRunner", "EditorEnd", "StdioEditor"]

DEATH_REPORT_WAIT = 0.5  # how long to wait for a dying child's status and stderr
END_LINE_WAIT = 0.5  # how long a component gets at shutdown to take a line it has half read


class EditorEnd(Protocol):
    """The editor's side of one chain: stdio for `run`, a WebSocket for `serve`."""

    # True when the editor may still read after it stops writing (a pipe's half close):
    # the runner then lets requests in flight finish before it stops the chain.
    half_close: bool

    def start(self, runner: ChainRunner) -> Callable[[bytes], None]:
        """Start reading the editor into `runner.from_editor`; return how to send it a line.
        Report its leaving with `runner.editor_left` (or `editor_vanished`)."""
        ...

    @property
    def idle(self) -> bool:
        """Nothing is left to write to the editor."""
        ...

    def restore(self) -> None: ...

    async def finish(self, runner: ChainRunner) -> None:
        """The chain has stopped and its last lines are out: close the editor's side."""
        ...


class StdioEditor:
    """The editor on two file descriptors (an editor-launched `conductor run`)."""

    half_close = True

    def __init__(self, fd_in: int = 0, fd_out: int = 1) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.reader: PipeReader | None = None
        self.writer: PipeWriter | None = None

    def start(self, runner: ChainRunner) -> Callable[[bytes], None]:
        for fd in (self.fd_in, self.fd_out):
            os.set_blocking(fd, False)
        loop, flow, peer = runner.loop, runner.flow, runner.editor_peer
        self.writer = PipeWriter(loop, self.fd_out, "editor", peer, flow)
        self.writer.on_broken = runner.editor_vanished
        self.reader = PipeReader(
            loop,
            self.fd_in,
            "editor",
            peer,
            flow,
            runner.from_editor,
            lambda: runner.editor_left("the editor closed its input"),
        )
        return self.writer.send

    @property
    def idle(self) -> bool:
        return self.writer is None or self.writer.idle or self.writer.broken

    def restore(self) -> None:
        for part in (self.reader, self.writer):
            if part is not None:
                part.close()
        for fd in (self.fd_in, self.fd_out):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, True)

    async def finish(self, runner: ChainRunner) -> None:
        return None


@attrs.define(eq=False)
class _Component:
    process: ChildProcess
    link: ByteLink
    reader: PipeReader
    writer: PipeWriter
    stderr: StderrReader
    reported: bool = False


@attrs.define(eq=False)
class _Remote:
    """A component served elsewhere, reached over a WebSocket we open."""

    spec: ComponentSpec
    link: ByteLink
    writer: wsio.WsWriter
    gate: wsio.PauseGate
    ws: wsio.WebSocketConnection | None = None
    reported: bool = False


class ChainRunner:
    """Runs `chain` for one editor until it ends (inside `loop.run`).

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
        self.trace = trace
        self._wire_log = log.isEnabledFor(logging.DEBUG)
        self.flow = Flow()
        # The editor reads whatever it is sent, whether or not we read it: not a blocking peer.
        self.editor_peer = Peer("editor", blocking=False)
        self.components: list[_Component] = []
        self.remotes: list[_Remote] = []
        self.hosts: list[PluginHost] = []
        # Plugins are made before anything starts: a refusal stops the run right here.
        self.plugins = {c.name: c.make_plugin() for c in chain.proxies if c.plugin is not None}
        self.exit_code = 0
        self.end = ""  # why the run ended, in words (a served connection's close reason)
        self._done = trio.Event()
        self._stderr = StderrSink()
        self._closing = False
        self._editor_gone = False  # it stopped writing
        self._editor_vanished = False  # it cannot read either
        self.loop: Loop = None  # type: ignore[assignment]  # set in run
        self._nursery: trio.Nursery | None = None
        self.router: Router = None  # type: ignore[assignment]
        self.editor: ByteLink = None  # type: ignore[assignment]

    async def run(self) -> int:
        """Serve until the editor leaves, a signal arrives, or a component dies."""
        self.loop = current_loop()
        if self.reap_orphans:
            become_subreaper()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                # Nothing is read before this tick ends, so the router is there in time.
                send = self.editor_end.start(self)
                self.editor = ByteLink(
                    "editor", self._logged(send, "editor") if self._wire_log else send
                )
                self.router = Router(self.editor, self.chain.proxy_mode, self._effect, self.trace)
                if self.trace is not None:
                    self.trace.attach(self.loop)
                if self.watch_signals:
                    nursery.start_soon(self._watch_signals)
                await self._done.wait()
                await self._shutdown()
                self._nursery = None  # nothing new starts once the chain is down
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            for component in self.components:
                component.reader.close()
                component.writer.close()
                component.stderr.close()
                component.process.close_pipes()
            if self.trace is not None:
                self.trace.close()
            self.editor_end.restore()
        return self.exit_code

    @property
    def nursery(self) -> trio.Nursery:
        """The run's nursery (an editor end starts its tasks there)."""
        assert self._nursery is not None
        return self._nursery

    def stop(self, why: str) -> None:
        """End the run from outside (a served connection's server is shutting down)."""
        if not self._done.is_set():
            self.end = why
            self._done.set()

    # ---------------------------------------------------------------- editor

    def from_editor(self, lines: list[bytes]) -> None:
        """Lines from the editor (a flow-control burst of the editor's peer is open)."""
        if self._wire_log:
            self._log_lines("editor", lines)
        receive, editor = self.router.receive, self.editor
        for line in lines:
            receive(editor, line)

    def editor_left(self, why: str) -> None:
        """The editor stopped writing (it may still read what is in flight)."""
        log.info("%s%s; shutting down", self.label, why)
        self._editor_gone = True
        if not self._done.is_set():
            self.end = why
        self.loop.call_soon_trio(self._done.set)

    def editor_vanished(self) -> None:
        """Nothing can reach the editor any more (its end of our output is closed)."""
        self._editor_vanished = True
        self.router.editor.failure = {"message": "the editor went away", "component": "editor"}
        self.editor_left("the editor went away")

    # ------------------------------------------------------------ components

    def _effect(self, effect: str) -> None:
        """What the router asks for. `START_CHAIN`: hold the editor, start the components."""
        assert effect == START_CHAIN
        self.editor_peer.hold()
        self.spawn(self._start_chain)

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Start `fn(*args)` in the run's nursery soon (from any context), unless the run
        is over by then."""

        def start() -> None:
            if self._nursery is not None:
                self._nursery.start_soon(fn, *args)

        self.loop.call_soon_trio(start)

    async def _start_chain(self) -> None:
        links: list[Link] = []
        try:
            for spec in self.chain.components:
                if spec.url is not None:
                    links.append(self._start_remote(spec))
                elif spec.plugin is not None:
                    links.append(self._start_plugin(spec))
                else:
                    links.append(self._start_process(spec))
        except OSError as exc:
            # The editor gets the error; the chain cannot run half-started, so end it.
            log.error("%s%s; shutting the chain down", self.label, exc)
            self.router.chain_failed(str(exc))
            self.exit_code = 1
            self.end = str(exc)
            self._done.set()
        else:
            for host in self.hosts:
                host.start()  # on_start runs before the plugin sees the initialize
            self.router.chain_started(links)
        self.editor_peer.release()

    def _start_plugin(self, spec: ComponentSpec) -> Link:
        assert self._nursery is not None
        nursery, loop = self._nursery, self.loop

        def spawn(fn: Callable[..., Any], *args: Any) -> None:
            loop.call_soon_trio(nursery.start_soon, fn, *args)

        host = PluginHost(
            self.plugins[spec.name],
            spec.name,
            spawn=spawn,
            call_soon=loop.call_soon_trio,
            flow=self.flow,
        )
        self.hosts.append(host)
        return PluginLink(spec.name, host)

    def _start_process(self, spec: ComponentSpec) -> Link:
        assert self._nursery is not None
        process = ChildProcess(spec, self.tag, self.label)
        peer = Peer(spec.name)
        writer = PipeWriter(self.loop, process.stdin, spec.name, peer, self.flow)
        send = self._logged(writer.send, spec.name) if self._wire_log else writer.send
        link = ByteLink(spec.name, send, is_proxy=spec.role == "proxy", dialect=spec.dialect)
        receive = self.router.receive

        def deliver(lines: list[bytes]) -> None:
            if self._wire_log:
                self._log_lines(spec.name, lines)
            for line in lines:
                receive(link, line)

        holder: list[_Component] = []

        def down() -> None:
            self.spawn(self._component_down, holder[0])

        reader = PipeReader(self.loop, process.stdout, spec.name, peer, self.flow, deliver, down)
        stderr = StderrReader(
            self.loop,
            process.stderr,
            f"[{self.label}{spec.name}] ",
            self._stderr,
            process.stderr_tail,
            lambda: self.loop.call_soon_trio(process.stderr_done.set),
        )
        component = _Component(process, link, reader, writer, stderr)
        holder.append(component)
        writer.on_broken = down
        self.components.append(component)
        self._nursery.start_soon(self._watch_component, component)
        return link

    def _start_remote(self, spec: ComponentSpec) -> Link:
        """A remote component: its link queues frames until the connection opens."""
        assert self._nursery is not None
        peer = Peer(spec.name)
        writer = wsio.WsWriter(spec.name, self.loop, self.flow, peer)
        send = self._logged(writer.send, spec.name) if self._wire_log else writer.send
        link = ByteLink(spec.name, send, is_proxy=spec.role == "proxy", dialect=spec.dialect)
        remote = _Remote(spec, link, writer, wsio.PauseGate(peer, self.loop.call_soon_trio))
        self.remotes.append(remote)
        self._nursery.start_soon(writer.drain_forever)
        self._nursery.start_soon(self._run_remote, remote, peer)
        return link

    async def _run_remote(self, remote: _Remote, peer: Peer) -> None:
        spec = remote.spec
        assert spec.url is not None
        shown = wsio.public_url(spec.url)
        close: wsio.CloseReason | None = None
        receive, link, flow = self.router.receive, remote.link, self.flow

        def deliver(lines: list[bytes]) -> None:
            if self._wire_log:
                self._log_lines(spec.name, lines)
            previous = flow.begin(peer)
            try:
                for line in lines:
                    receive(link, line)
            finally:
                flow.end(previous)

        try:
            async with wsio.connection(spec.url, spec.headers) as ws:
                remote.ws = ws
                remote.writer.attach(ws)
                log.info("%sconnected %s %r to %s", self.label, spec.role, spec.name, shown)
                await wsio.read_frames(ws, deliver, remote.gate)
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
        self.exit_code = 1
        self.end = cause["message"]
        self._done.set()

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

    # ------------------------------------------------------------- plumbing

    @staticmethod
    def _logged(send: Callable[[bytes], None], name: str) -> Callable[[bytes], None]:
        """--log-level debug: every line out, with the peer it goes to."""
        label = f"conductor -> {name}"

        def logged(line: bytes) -> None:
            log.debug("%s: %s", label, line.decode("utf-8", "replace"))
            send(line)

        return logged

    @staticmethod
    def _log_lines(name: str, lines: list[bytes]) -> None:
        for line in lines:
            log.debug("%s -> conductor: %s", name, line.decode("utf-8", "replace"))

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                log.info("received %s; shutting down", name)
                self.stop(f"received {name}")
                return

    async def _shutdown(self) -> None:
        with trio.CancelScope(shield=True):
            if (
                self._editor_gone
                and not self._editor_vanished
                and self.exit_code == 0
                and self.editor_end.half_close
            ):
                # The editor stopped writing but may still read: let what it asked finish.
                with trio.move_on_after(self.grace):
                    while (
                        self.editor.incoming and self.exit_code == 0 and not self._editor_vanished
                    ):
                        await trio.sleep(0.01)
            self._closing = True
            async with trio.open_nursery() as closing:
                for remote in self.remotes:
                    if remote.ws is not None:
                        closing.start_soon(self._close_remote, remote.ws)
                await self._end_lines()
                for component in self.components:
                    component.writer.close()
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
                while not self.editor_end.idle and not self._editor_vanished:
                    await trio.sleep(0.01)
            await self.editor_end.finish(self)

    async def _end_lines(self) -> None:
        """Let each component get the rest of a line it was halfway through receiving (what
        was not started is dropped), so none reads a truncated message at shutdown."""
        writers = [c.writer for c in self.components]
        for writer in writers:
            writer.end_line()
        with trio.move_on_after(min(self.grace, END_LINE_WAIT)):
            while not all(w.idle or w.broken for w in writers):
                await trio.sleep(0.01)

    @staticmethod
    async def _close_remote(ws: wsio.WebSocketConnection) -> None:
        """Say goodbye to a remote component with a close frame (it stops its own chain)."""
        with trio.move_on_after(2.0):
            await ws.aclose(1000, "the chain is shutting down")
