"""What the router moves, and the links it moves it over.

A `Transit` is one request or notification on its way through the chain; an
`Answer` is a response on its way back. A `Link` is one peer of the chain as
the router sees it, with the bookkeeping of its hop (ids, open requests). A
`ByteLink` (a pipe, a WebSocket, a test's memory) encodes what it is given,
splicing the sender's exact bytes; a `PluginLink` hands the objects to an
in-process plugin's host, which may pass a transit on, hold it, or answer it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from . import wire
from .protocol import LEGACY_WIRE, PLAIN_WIRE, UNDERSCORE_WIRE, Dialect

__all__ = ["Answer", "ByteLink", "Link", "NodeHost", "PluginLink", "RouterPort", "Transit"]

_UNSET: Any = object()


class Transit:
    """One request or notification on its way, resumable at any node.

    Made when a message enters the router; the router walks it from node to
    node, and a plugin may hold it (queued behind its current call, or served
    by a hook that awaits) and hand it back. For a request it then stays, as
    the route of the reply: where the answer goes, and what to check on the
    way. `frame` is the message as received while it can still travel as
    those bytes with only its id replaced.
    """

    __slots__ = (
        "_canonical",
        "_method_raw",
        "_params_raw",
        "addressed",
        "batch",
        "closed",
        "expect_version",
        "frame",
        "hops",
        "key",
        "legacy_init",
        "mcp_key",
        "method",
        "modified",
        "origin",
        "params",
        "raw_id",
        "retry",
        "session",
        "size",
        "source",
        "upward",
    )

    def __init__(
        self,
        source: Link,
        origin: int,
        upward: bool,
        method: str,
        key: Any,
        raw_id: bytes | None,
        params: Any,
        frame: wire.Message | None,
        method_raw: bytes | None = None,
        params_raw: bytes | None = _UNSET,
        size: int = 0,
    ) -> None:
        self.source = source  # the link it came from, which gets the answer
        self.origin = origin  # the node it came from
        self.upward = upward  # travelling toward the editor
        self.method = method
        self.key = key  # its id as the source gave it (None for a notification)
        self.raw_id = raw_id  # ... and that id's exact bytes
        self.params = params
        self.frame = frame
        self._method_raw = method_raw
        self._params_raw = params_raw
        self.size = size  # bytes it stands for, for flow control while it is queued
        self._canonical: bytes | None = None  # orjson's bytes for `params` (see `snapshot`)
        self.modified = False
        self.closed = False  # answered: a later answer (after a shutdown's) is dropped
        self.batch: Any = None  # the editor batch collecting its answer
        self.addressed = False  # routed to a named node: plugins between are not visited
        self.session: str | None = None  # only filled when tracing
        self.hops: list[tuple[int, int]] | None = None  # tracing: plugins that saw it (node, id)
        self.mcp_key: tuple[str, str] | None = None  # an open mcp/message: (serverId, requestId)
        self.expect_version: int | None = None  # the answer must carry this protocolVersion
        self.retry: tuple[int, bytes | None] | None = None  # dialect fallback: (node, params)
        self.legacy_init = False  # an initialize offering the proxy role (older draft)

    @property
    def is_request(self) -> bool:
        return self.raw_id is not None

    @property
    def params_raw(self) -> bytes | None:
        """The exact bytes of its params (None when it has none)."""
        raw = self._params_raw
        if raw is _UNSET:
            assert self.frame is not None
            raw = self._params_raw = (
                self.frame.member("params") if self.params is not None else None
            )
        return raw

    @property
    def method_raw(self) -> bytes:
        raw = self._method_raw
        if raw is None:
            raw = self._method_raw = (
                self.frame.member("method") if self.frame is not None else None
            ) or wire.dumps(self.method)
        return raw

    def snapshot(self) -> bytes | None:
        """The params' canonical encoding as they are now, made once and kept until a hook
        changes them: what a hook's work is compared with, to see whether it changed them."""
        if self._canonical is None and self.params is not None:
            self._canonical = wire.dumps(self.params)
        return self._canonical

    def change_params(self, params: Any, raw: bytes | None, canonical: bytes | None) -> None:
        """A hook changed the params: from now on they travel as `raw`."""
        self.params = params
        self._params_raw = raw
        self._canonical = canonical
        self.modified = True

    def encode(self, new_id: bytes | None, wrapper: bytes | None) -> bytes:
        """Its line for a byte link: re-addressed with `new_id`, wrapped in a successor
        envelope when `wrapper` (the quoted envelope method) is given."""
        frame = self.frame
        if frame is not None and wrapper is None:
            if not self.modified:
                return frame.raw if new_id is None else frame.with_id(new_id)
            if "params" in frame.obj and self.params_raw is not None:
                changes = {"params": self.params_raw}
                if new_id is not None:
                    changes["id"] = new_id
                return frame.replace(changes)
        if wrapper is not None:
            return wire.envelope(new_id, wrapper, self.method_raw, self.params_raw)
        return wire.request(new_id, self.method_raw, self.params_raw)

    def forget_payload(self) -> None:
        """Delivered: only the route is kept (a long-running request holds no bytes)."""
        self.frame = None
        self.params = None
        self._params_raw = None

    def __repr__(self) -> str:
        kind = "request" if self.is_request else "notification"
        return f"<Transit {kind} {self.method} from {self.source.name}>"


class Answer:
    """A response on its way back to the source of `transit`."""

    __slots__ = ("_payload_raw", "frame", "is_error", "payload", "transit")

    def __init__(
        self,
        transit: Transit,
        is_error: bool,
        payload: Any,
        payload_raw: bytes | None,
        frame: wire.Message | None = None,
    ) -> None:
        self.transit = transit
        self.is_error = is_error
        self.payload = payload  # the parsed result or error
        self._payload_raw = payload_raw  # ... and its exact bytes (from `frame` if None)
        self.frame = frame  # the response as received, while only its id needs changing

    @property
    def payload_raw(self) -> bytes:
        raw = self._payload_raw
        if raw is None:
            assert self.frame is not None
            raw = self.frame.member("error" if self.is_error else "result") or b"null"
            self._payload_raw = raw
        return raw

    @property
    def size(self) -> int:
        """Bytes it stands for, for flow control while a plugin holds it back."""
        return len(self.frame.raw) if self.frame is not None else len(self._payload_raw or b"")

    @classmethod
    def error(cls, transit: Transit, code: int, message: str, data: Any = None) -> Answer:
        """An error the conductor raises itself."""
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return cls(transit, True, error, wire.dumps(error))

    def encode(self, raw_id: bytes) -> bytes:
        if self.frame is not None:
            return self.frame.with_id(raw_id)
        return wire.response(raw_id, b"error" if self.is_error else b"result", self.payload_raw)


class RouterPort(Protocol):
    """What an in-process plugin's host may ask of the router it is a node of."""

    def resume(self, link: Link, t: Transit) -> None: ...

    def resume_answer(self, link: Link, answer: Answer) -> None: ...

    def answer(self, t: Transit, link: Link, is_error: bool, payload: Any, raw: bytes) -> None: ...

    def hold(self, t: Transit, link: Link, side: str) -> None: ...

    def from_plugin(
        self, link: Link, to: str, method: str, key: Any, params: Any, params_raw: bytes | None
    ) -> None: ...


class NodeHost(Protocol):
    """What the router asks of an in-process plugin's host (see `plugin_host`)."""

    ctx: Any  # the plugin's Context (its protocol_version is set at start)

    def attach(self, router: RouterPort, link: Link) -> None: ...

    def busy(self, side: str) -> bool: ...

    def visits(self, side: str, t: Transit) -> bool: ...

    def offer(self, side: str, t: Transit) -> bool: ...

    def defer_answer(self, side: str, answer: Answer) -> None: ...

    def answered(self, answer: Answer) -> None: ...

    def cancel(self, side: str, handle: Transit | int) -> None: ...


class Link:
    """One peer of the chain as the router sees it, and the bookkeeping for its hop."""

    __slots__ = (
        "dialect",
        "failure",
        "host",
        "incoming",
        "init_method",
        "is_proxy",
        "name",
        "next_id",
        "pending",
        "wrapper",
    )

    def __init__(self, name: str, is_proxy: bool, dialect: str = Dialect.AUTO) -> None:
        self.host: NodeHost | None = None  # an in-process plugin's, which sees objects
        self.name = name
        self.is_proxy = is_proxy
        self.dialect = dialect
        self.init_method, self.wrapper = PLAIN_WIRE if dialect == Dialect.PLAIN else UNDERSCORE_WIRE
        self.next_id = 0
        self.pending: dict[int, Transit] = {}  # our request id on this link -> the route back
        # its request id -> (the link holding it now, the id there, the side it arrived from there)
        self.incoming: dict[Any, tuple[Link, int, str]] = {}
        self.failure: dict[str, Any] | None = None

    def allocate(self, transit: Transit) -> int:
        self.next_id += 1
        self.pending[self.next_id] = transit
        return self.next_id

    def wrapper_for(self, request: bool) -> bytes:
        """The quoted envelope method for a message delivered to this proxy from below."""
        if self.dialect == Dialect.LEGACY:
            return LEGACY_WIRE[0] if request else LEGACY_WIRE[1]
        return self.wrapper

    def deliver(
        self, transit: Transit, our_id: int | None, side: str, wrapper: bytes | None
    ) -> None:
        """Hand over a request (with `our_id`) or notification arriving from `side`."""
        raise NotImplementedError

    def deliver_answer(self, answer: Answer) -> None:
        """Hand over the answer to a request this link sent (its own id is the transit's)."""
        raise NotImplementedError

    def deliver_cancel(self, our_id: int, side: str) -> None:
        """Cancel the request we gave this link as `our_id`, which it got from `side`."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ByteLink(Link):
    """A peer spoken to in JSON lines (a pipe, a WebSocket, a test's memory)."""

    __slots__ = ("send",)

    def __init__(
        self,
        name: str,
        send: Callable[[bytes], None],
        is_proxy: bool = False,
        dialect: str = Dialect.AUTO,
    ) -> None:
        super().__init__(name, is_proxy, dialect)
        self.send = send  # takes one line without its newline; never blocks

    def deliver(
        self, transit: Transit, our_id: int | None, side: str, wrapper: bytes | None
    ) -> None:
        self.send(transit.encode(None if our_id is None else str(our_id).encode(), wrapper))

    def deliver_answer(self, answer: Answer) -> None:
        raw_id = answer.transit.raw_id
        assert raw_id is not None
        self.send(answer.encode(raw_id))

    def deliver_cancel(self, our_id: int, side: str) -> None:
        # Plain, whichever side the request came from: cancellation is hop-by-hop, and the
        # ids the conductor gives a component are unique across both of its sides.
        self.send(
            b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":%d}}' % our_id
        )


class PluginLink(Link):
    """An in-process plugin: its host sees Python objects, never JSON."""

    __slots__ = ("_plugin",)

    def __init__(self, name: str, host: NodeHost) -> None:
        super().__init__(name, is_proxy=True)
        self.host = host
        self._plugin = host

    def deliver(
        self, transit: Transit, our_id: int | None, side: str, wrapper: bytes | None
    ) -> None:
        raise AssertionError("the router offers transits to a plugin; it never delivers them")

    def deliver_answer(self, answer: Answer) -> None:
        self._plugin.answered(answer)

    def deliver_cancel(self, our_id: int, side: str) -> None:
        self._plugin.cancel(side, our_id)
