"""`conductor proxy MODULE:FACTORY`: one plugin as an ordinary stdio proxy component.

Any conductor (this one or another implementation) can then run the plugin
as a subprocess speaking `_proxy/initialize` and `_proxy/successor`. Messages
no hook touches keep their payload bytes; only what a hook handled is
encoded again.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson
import trio

from . import wire
from .fdio import FdWriter, Writer, flush_all, read_lines
from .plugin import AGENT, EDITOR
from .plugin_host import CANCEL, PluginHost

log = logging.getLogger("conductor")

PROXY_INITIALIZE = ("_proxy/initialize", "proxy/initialize")
SUCCESSOR = ("_proxy/successor", "proxy/successor")


class StdioTransport:
    """Frames the host's messages for its conductor: plain upstream, wrapped downstream."""

    def __init__(self, writer: FdWriter, dirty: list[Writer]) -> None:
        self.writer = writer
        self.dirty = dirty
        self.wrapper = b'"_proxy/successor"'
        self.sent_to: dict[Any, str] = {}  # our request id -> the side it went to

    def send(self, to: str, message: dict[str, Any], raw: bytes | None) -> None:
        method = message.get("method")
        if method is not None and "id" in message:
            self.sent_to[message["id"]] = to
        if to == AGENT and method is not None:
            params = message.get("params")
            if raw is None and params is not None:
                raw = orjson.dumps(params)
            request_id = wire.encode_id(message["id"]) if "id" in message else None
            line = wire.envelope(request_id, self.wrapper, orjson.dumps(method), raw)[:-1]
        else:
            line = wire.Message(None, message, raw).raw
        self.writer.send(line)
        flush_all(self.dirty)


class StandaloneProxy:
    """Reads the conductor's messages from stdin and hands them to the plugin host."""

    def __init__(self, plugin: Any, name: str, stdin: int = 0, stdout: int = 1) -> None:
        self.stdin = stdin
        self.dirty: list[Writer] = []
        self.writer = FdWriter(stdout, "conductor", self.dirty)
        self.transport = StdioTransport(self.writer, self.dirty)
        self.host = PluginHost(plugin, name, self.transport)

    async def run(self) -> None:
        for fd in (self.stdin, self.writer.fd):
            os.set_blocking(fd, False)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.writer.drain_forever)
                nursery.start_soon(self.host.run)
                await read_lines(self.stdin, self._lines)
                self.host.fail_pending(
                    {"code": -32603, "message": "the conductor closed the connection"}
                )
                nursery.cancel_scope.cancel()
        finally:
            for fd in (self.stdin, self.writer.fd):
                os.set_blocking(fd, True)

    def _lines(self, lines: list[bytes]) -> None:
        for line in lines:
            try:
                obj = wire.parse(line)
            except wire.ParseError:
                log.warning("the conductor sent a line that is not JSON (dropped): %.200r", line)
                continue
            if type(obj) is dict:
                self._message(wire.Message(line, obj))

    def _message(self, msg: wire.Message) -> None:
        obj = msg.obj
        method = obj.get("method")
        host = self.host
        if method is None:
            side = self.transport.sent_to.pop(obj.get("id"), EDITOR)
            payload = "error" if "error" in obj else "result"
            host.receive(side, obj, msg.raw_member(payload))
            return
        if method in PROXY_INITIALIZE:
            if method == "proxy/initialize":
                self.transport.wrapper = b'"proxy/successor"'
            params = obj.get("params")
            if isinstance(params, dict) and isinstance(params.get("protocolVersion"), int):
                host.ctx.protocol_version = params["protocolVersion"]
            host.receive(EDITOR, {**obj, "method": "initialize"}, msg.raw_member("params"))
        elif method in SUCCESSOR:
            found = msg.inner("params")
            if found is None or not isinstance(found[1].get("method"), str):
                log.warning("the conductor sent an envelope without a wrapped method (dropped)")
                return
            spans, envelope = found
            inner: dict[str, Any] = {"jsonrpc": "2.0"}
            if "id" in obj:
                inner["id"] = obj["id"]
            inner["method"] = envelope["method"]
            raw = None
            if envelope.get("params") is not None:
                inner["params"] = envelope["params"]
                raw = msg.raw[spans["params"][0] : spans["params"][1]]
            host.receive(AGENT, inner, raw)
        elif method == CANCEL:
            host.cancel_from_either_side(obj.get("params"))
        else:
            has_params = obj.get("params") is not None
            host.receive(EDITOR, obj, msg.raw_member("params") if has_params else None)


def run_standalone(plugin: Any, name: str) -> None:
    trio.run(StandaloneProxy(plugin, name).run)
