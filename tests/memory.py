"""The in-memory tier: the router and plugin hosts driven over memory links, no processes.

As h11 tests a connection pair, these tests feed the sans-I/O router lines as
if they came from the editor, a proxy or the agent, and read back what it
handed each peer. A chain is written as the components' kinds, nearest the
editor first:

    chain = MemoryChain("proxy", "agent")
    chain.editor.request(1, "initialize", {"protocolVersion": 1})
    assert chain.started                        # START_CHAIN was carried out
    [init] = chain["proxy"].take()              # what the proxy got
    assert init["method"] == "_proxy/initialize"

A component given as a plugin object runs in-process under a `PluginHost`;
tests with plugins whose hooks await run inside trio and pass their nursery,
then `await settle()` to let hook tasks run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from conftest import JsonRpcTalk

from conductor import wire
from conductor.flow import Flow
from conductor.links import ByteLink, Link, PluginLink
from conductor.plugin_host import PluginHost
from conductor.router import START_CHAIN, Router

__all__ = ["End", "MemoryChain", "settle"]


async def settle() -> None:
    """Let every hook task run until all wait (for plugins whose hooks await)."""
    await trio.testing.wait_all_tasks_blocked()


class End(JsonRpcTalk):
    """One peer of a memory chain: what it sends goes into the router, what the router
    sends it is kept until a test takes it (or reads it: `request`, `response` and the
    rest of the test peers' vocabulary work here too)."""

    def __init__(self, chain: MemoryChain, name: str) -> None:
        self.chain = chain
        self.name = name
        self.received: list[bytes] = []
        self.link: Link | None = None
        self._came_from_below: dict[Any, bool] = {}  # relay(): where each request came from
        self._plain = False  # relay(): spoken to in the plain dialect

    # ------------------------------------------------------------- sending

    def send_raw(self, line: bytes) -> None:
        assert self.link is not None, f"{self.name} is not started"
        self.chain.router.receive(self.link, line)

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message, separators=(",", ":")).encode())

    def read(self, timeout: float = 0.0) -> Any:
        """The next message the router handed this peer (there must be one: nothing waits)."""
        assert self.received, f"{self.name} got nothing"
        return json.loads(self.received.pop(0))

    def respond(self, id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "result": result})

    def fail(self, id: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})

    def successor(self, id: Any, method: str, params: Any = None) -> None:
        """A proxy's `_proxy/successor` envelope (a notification when `id` is None)."""
        inner: dict[str, Any] = {"method": method}
        if params is not None:
            inner["params"] = params
        if id is None:
            self.notify("_proxy/successor", inner)
        else:
            self.request(id, "_proxy/successor", inner)

    # ----------------------------------------------------------- receiving

    def take_raw(self) -> list[bytes]:
        """The lines the router handed this peer since the last take."""
        lines = self.received[:]
        self.received.clear()
        return lines

    def take(self) -> list[Any]:
        """The same, parsed."""
        return [json.loads(line) for line in self.take_raw()]

    def take_one(self) -> Any:
        messages = self.take()
        assert len(messages) == 1, f"{self.name} got {messages}"
        return messages[0]

    # ------------------------------------------------------------ relaying

    def relay(self) -> list[Any]:
        """Act as a pass-through proxy for what this peer got since the last take: a plain
        request or notification (from its predecessor) goes on wrapped in `_proxy/successor`
        (in the dialect it was spoken to in), a wrapped one (from its successor) goes back
        plain, a response answers the request it was the answer to, a cancel is passed on
        to the side the cancelled request went to. Params and results keep their exact
        bytes, and each id is kept: the ids a proxy sends are its own, so the conductor's
        ids serve as the proxy's. Returns what it got, parsed."""
        got = []
        for raw in self.take_raw():
            message = json.loads(raw)
            got.append(message)
            method = message.get("method")
            params = _member(raw, message, "params")
            if method is None:
                self.send_raw(raw)  # our request with this id gets the same answer
            elif method == "$/cancel_request":
                request_id = message["params"]["requestId"]
                if self._came_from_below.get(request_id):
                    self.send_raw(raw)
                else:
                    self.send_raw(_envelope(None, "_proxy/successor", method, params))
            elif method in ("_proxy/successor", "proxy/successor"):
                assert params is not None
                inner = json.loads(params)
                inner_params = _member(params, inner, "params")
                if "id" in message:
                    self._came_from_below[message["id"]] = True
                self.send_raw(_request(message.get("id"), inner["method"], inner_params))
            else:
                wrapper = "_proxy/successor"
                if method == "proxy/initialize" or self._plain:
                    self._plain = True
                    wrapper = "proxy/successor"
                if method.endswith("proxy/initialize"):
                    method = "initialize"
                if "id" in message:
                    self._came_from_below[message["id"]] = False
                self.send_raw(_envelope(message.get("id"), wrapper, method, params))
        return got

    def __repr__(self) -> str:
        return f"<End {self.name}>"


class MemoryChain:
    """A router with memory links for the editor and each component.

    `components` are "proxy" or "agent" (byte links named so, or `name:kind`
    for several of a kind, e.g. "p1:proxy"), or plugin objects (in-process
    proxies, named `plugin1`, `plugin2`... unless they have a `name`).
    Without an "agent" the chain runs in proxy mode: its successor is the
    editor link too. `start=False` leaves START_CHAIN to `start()`.
    """

    def __init__(
        self,
        *components: Any,
        dialects: dict[str, str] | None = None,
        nursery: trio.Nursery | None = None,
        observer: Any = None,
        start: bool = True,
    ) -> None:
        self.flow = Flow()
        self.editor = End(self, "editor")
        self._nursery = nursery
        self._auto_start = start
        self.starts = 0  # how many START_CHAIN effects the router emitted
        self.ends: dict[str, End] = {}
        self.hosts: dict[str, PluginHost] = {}
        self._links: list[Link] = []
        kinds = []
        plugins = 0
        for component in components:
            if isinstance(component, str):
                name, _, kind = component.partition(":")
                kind = kind or name
                kinds.append(kind)
                end = End(self, name)
                dialect = (dialects or {}).get(name, "auto")
                end.link = ByteLink(name, end.received.append, kind == "proxy", dialect)
                self.ends[name] = end
                self._links.append(end.link)
            else:
                plugins += 1
                name = getattr(component, "name", None) or f"plugin{plugins}"
                host = PluginHost(
                    component, name, spawn=self._spawn, call_soon=_call_now, flow=self.flow
                )
                self.hosts[name] = host
                self._links.append(PluginLink(name, host))
        proxy_mode = "agent" not in kinds
        self.editor.link = ByteLink("editor", self.editor.received.append)
        self.router = Router(self.editor.link, proxy_mode, self._effect, observer)

    def __getitem__(self, name: str) -> End:
        return self.ends[name]

    @property
    def started(self) -> bool:
        return self.router.started

    def start(self) -> None:
        """Carry out START_CHAIN: the components are there."""
        for host in self.hosts.values():
            host.start()
        self.router.chain_started(self._links)

    def _effect(self, effect: str) -> None:
        assert effect == START_CHAIN, effect
        self.starts += 1
        if self._auto_start:
            self.start()

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._nursery is not None, "a plugin hook that may await needs a nursery"
        self._nursery.start_soon(fn, *args)

    def initialize(self, version: int = 1, **params: Any) -> None:
        """Initialize the chain end to end, answering as each component would."""
        self.editor.request("init", "initialize", {"protocolVersion": version, **params})
        for name, end in self.ends.items():
            [request] = end.take()
            if request["method"] == "initialize" or name == "agent":
                end.respond(request["id"], {"protocolVersion": version})
            else:
                end.successor(request["id"], "initialize", request.get("params"))
        self._answer_initialize_back(version)
        [answer] = self.editor.take()
        assert answer == {"jsonrpc": "2.0", "id": "init", "result": {"protocolVersion": version}}

    def relay(self) -> None:
        """Let every byte-link proxy pass on what it got (see `End.relay`) until none has
        anything left: what reaches the editor and the agent stays for the test to take."""
        proxies = [end for end in self.ends.values() if end.link is not None and end.link.is_proxy]
        while any(end.received for end in proxies):
            for end in proxies:
                end.relay()

    def _answer_initialize_back(self, version: int) -> None:
        for end in reversed(list(self.ends.values())):
            for message in end.take():
                assert "result" in message, message
                end.respond(message["id"], message["result"])


def _call_now(fn: Callable[..., Any], *args: Any) -> None:
    fn(*args)


def _member(raw: bytes, obj: dict[str, Any], key: str) -> bytes | None:
    """The exact bytes of a top-level member of the object `raw` spells."""
    if key not in obj:
        return None
    return wire.Message(raw, obj).member(key)


def _request(id: Any, method: str, params: bytes | None) -> bytes:
    head = b'{"jsonrpc":"2.0",'
    if id is not None:
        head += b'"id":' + json.dumps(id).encode() + b","
    head += b'"method":' + json.dumps(method).encode()
    return head + (b"}" if params is None else b',"params":' + params + b"}")


def _envelope(id: Any, wrapper: str, method: str, params: bytes | None) -> bytes:
    inner = b'{"method":' + json.dumps(method).encode()
    inner += b"}" if params is None else b',"params":' + params + b"}"
    return _request(id, wrapper, inner)
