"""Routing between the editor, the proxies and the agent, as a plain state machine.

The router owns no I/O. It is fed one line at a time with the link it came
from, and answers by calling `Link.send` with the lines each peer must get.
The runtime decides how bytes move; this module decides where they go.

Positions: node 0 is the editor, nodes 1..k the proxies, node k+1 the agent.
In proxy mode (no agent) node k+1 is the conductor's own successor, reached
through the editor link with messages wrapped in the successor envelope.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from . import wire
from .plugin import AGENT, EDITOR
from .trace import session_of
from .wire import Message, make_message

if TYPE_CHECKING:
    from .plugin_host import PluginHost
    from .trace import Tracer

log = logging.getLogger("conductor")

INITIALIZE = "initialize"
PROXY_INITIALIZE = ("_proxy/initialize", "proxy/initialize")
# The older draft (spoken by @thinkwell/conductor): `initialize` with `_meta.proxy`, and
# successor methods named by message kind.
LEGACY_REQUEST, LEGACY_NOTIFICATION = "_proxy/successor/request", "_proxy/successor/notification"
SUCCESSOR = ("_proxy/successor", "proxy/successor", LEGACY_REQUEST, LEGACY_NOTIFICATION)
CANCEL = "$/cancel_request"
MCP_MESSAGE = "mcp/message"
SESSION_SETUP = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
UNKNOWN_MCP_SERVER = -33001
UNDERSCORE = (b'"_proxy/initialize"', b'"_proxy/successor"')
PLAIN = (b'"proxy/initialize"', b'"proxy/successor"')

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SUPPORTED_VERSIONS = (1, 2)


class SpawnError(Exception):
    """Starting the chain's components failed; the message names the component."""


class Link:
    """One connection the conductor owns, and the bookkeeping for its hop."""

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
        "send",
        "wrapper",
    )

    def __init__(
        self, name: str, send: Callable[[bytes], None], is_proxy: bool, dialect: str = "auto"
    ) -> None:
        self.name = name
        self.send = send  # accepts one line without its newline; never blocks
        self.is_proxy = is_proxy
        self.dialect = dialect
        self.init_method, self.wrapper = PLAIN if dialect == "plain" else UNDERSCORE
        self.next_id = 0
        self.pending: dict[int, Route] = {}  # our request id on this link -> way back
        # its request id -> (link, our id there, side it arrived from there)
        self.incoming: dict[Any, tuple[Link, int, str]] = {}
        self.failure: dict[str, Any] | None = None
        self.host: PluginHost | None = None  # set for an in-process plugin

    def allocate(self, route: Route) -> bytes:
        self.next_id += 1
        self.pending[self.next_id] = route
        return str(self.next_id).encode()

    def use_dialect(self, method: str) -> None:
        """Answer a proxy in the form it uses."""
        if method in (LEGACY_REQUEST, LEGACY_NOTIFICATION):
            self.dialect = "legacy"
            return
        self.init_method, self.wrapper = UNDERSCORE if method[0] == "_" else PLAIN

    def wrapper_for(self, request: bool) -> bytes:
        """The quoted envelope method for a message delivered to this proxy."""
        if self.dialect == "legacy":
            return b'"_proxy/successor/request"' if request else b'"_proxy/successor/notification"'
        return self.wrapper

    def __repr__(self) -> str:
        return f"<Link {self.name}>"


class Batch:
    """Collects the responses to one batch from the editor into one array."""

    __slots__ = ("expected", "link", "responses", "sealed")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.expected = 0
        self.responses: list[bytes] = []
        self.sealed = False

    def add(self, line: bytes) -> None:
        self.responses.append(line)
        self._maybe_send()

    def seal(self) -> None:
        self.sealed = True
        self._maybe_send()

    def _maybe_send(self) -> None:
        if self.sealed and len(self.responses) == self.expected and self.expected:
            self.link.send(b"[" + b",".join(self.responses) + b"]")
            self.expected = 0


class Route:
    """Where the response to a forwarded request must go, and what to check on the way."""

    __slots__ = (
        "batch",
        "expect_version",
        "legacy_init",
        "mcp_key",
        "origin",
        "origin_id",
        "origin_key",
        "reply_side",
        "retry",
        "session",
    )

    def __init__(
        self,
        origin: Link,
        origin_id: bytes,
        origin_key: Any,
        batch: Batch | None = None,
        expect_version: int | None = None,
        retry: tuple[int, bytes | None] | None = None,
        reply_side: str = AGENT,
    ) -> None:
        self.origin = origin
        self.origin_id = origin_id
        self.origin_key = origin_key
        self.batch = batch
        self.expect_version = expect_version
        self.retry = retry  # (target node, params) for the dialect fallback
        self.reply_side = reply_side  # where the reply comes from, seen from the origin
        self.session: str | None = None  # only filled when tracing
        self.mcp_key: tuple[str, str] | None = None
        self.legacy_init = False  # an initialize offering the proxy role (older draft)  # an open mcp/message: (serverId, requestId)


class Router:
    """Routes every message between the links of one chain instance."""

    def __init__(
        self,
        editor: Link,
        proxy_mode: bool,
        start_chain: Callable[[], list[Link]],
    ) -> None:
        self.editor = editor
        self.proxy_mode = proxy_mode
        self._start_chain = start_chain
        self.nodes: list[Link] = [editor]
        self.started = False
        self.initialized = False
        self.initializing = False
        self.version: int | None = None
        self._node_of: dict[Link, int] = {editor: 0}
        self.trace: Tracer | None = None
        self.mcp_providers: dict[str, int] = {}  # serverId -> node that declared it first
        self.mcp_open: dict[tuple[str, str], int] = {}  # (serverId, requestId) -> consumer node

    # ----------------------------------------------------------------- setup

    def _start(self) -> None:
        links = self._start_chain()
        self.nodes = [self.editor, *links]
        if self.proxy_mode:
            self.nodes.append(self.editor)
        for index, link in enumerate(self.nodes[1:-1] if self.proxy_mode else self.nodes[1:], 1):
            self._node_of[link] = index
        self.started = True

    @property
    def last(self) -> int:
        return len(self.nodes) - 1

    def _link_label(self, link: Link, below: bool) -> str:
        """A link's name in traces; in proxy mode the editor link is also our successor."""
        if link is self.editor:
            return "successor" if self.proxy_mode and below else "editor"
        return link.name

    def _label(self, node: int) -> str:
        return self._link_label(self.nodes[node], node == self.last)

    # ------------------------------------------------------------- receiving

    def receive(self, link: Link, line: bytes) -> None:
        """Route one line that arrived on `link`."""
        try:
            obj = wire.parse(line)
        except wire.ParseError as exc:
            if link is self.editor:
                link.send(wire.error_response(b"null", PARSE_ERROR, "Parse error", str(exc))[:-1])
            else:
                log.warning("%s wrote a line that is not JSON (dropped): %.200r", link.name, line)
            return
        if type(obj) is dict:
            self._dispatch(link, Message(line, obj), None)
        elif type(obj) is list:
            self._batch(link, line, obj)
        else:
            self._invalid(link, None, b"null", "a JSON-RPC message must be an object or an array")

    def _batch(self, link: Link, line: bytes, items: list[Any]) -> None:
        if not items:
            self._invalid(link, None, b"null", "empty batch")
            return
        batch = Batch(link) if link is self.editor else None
        if self.trace is not None:
            self.trace.new_batch()
        for (start, end), obj in zip(wire.array_items(line), items, strict=True):
            if type(obj) is dict:
                self._dispatch(link, Message(line[start:end], obj), batch)
            else:
                self._invalid(link, batch, b"null", "a batch entry must be an object")
        if batch is not None:
            batch.seal()
        if self.trace is not None:
            self.trace.batch = None

    def _invalid(self, link: Link, batch: Batch | None, raw_id: bytes, why: str) -> None:
        if link is self.editor:
            self._reply(
                link, batch, wire.error_response(raw_id, INVALID_REQUEST, "Invalid Request", why)
            )
        else:
            log.warning("%s sent an invalid message (dropped): %s", link.name, why)

    def _reply(self, link: Link, batch: Batch | None, line: bytes) -> None:
        """Send a response line (with trailing newline) the conductor itself produced."""
        if self.trace is not None:
            obj = orjson.loads(line)
            self.trace.response("conductor", "editor", obj["id"], obj["error"], True, None)
        if batch is not None:
            batch.expected += 1
            batch.add(line[:-1])
        else:
            link.send(line[:-1])

    def _dispatch(self, link: Link, msg: Message, batch: Batch | None) -> None:
        obj = msg.obj
        method = obj.get("method")
        if method is None:
            if "id" in obj and ("result" in obj or "error" in obj):
                self._response(link, msg)
            else:
                self._invalid(
                    link,
                    batch,
                    msg.raw_member("id") or b"null",
                    "not a request, notification or response",
                )
            return
        has_id = "id" in obj
        raw_id = msg.raw_member("id") if has_id else None
        key = obj.get("id")
        if type(method) is not str or (has_id and type(key) not in (int, str) and key is not None):
            self._invalid(
                link,
                batch,
                raw_id or b"null",
                "'method' must be a string and 'id' a number or string",
            )
            return
        params = obj.get("params")
        if params is not None and type(params) not in (dict, list):
            self._invalid(link, batch, raw_id or b"null", "'params' must be an object or an array")
            return

        if link is self.editor and not (self.proxy_mode and method in SUCCESSOR):
            self._from_editor(msg, method, raw_id, key, batch)
            return
        node = self._node_of.get(link)
        if method in SUCCESSOR and (link.is_proxy or link is self.editor):
            link.use_dialect(method)
            self._unwrap(link, msg, raw_id, key, batch)
        elif node is None:
            log.warning("message from %s, which is not in the chain (dropped)", link.name)
        else:
            # A plain message from a component goes to its predecessor.
            self._route(link, node - 1, True, method, raw_id, key, msg, None, batch)

    def _from_editor(
        self, msg: Message, method: str, raw_id: bytes | None, key: Any, batch: Batch | None
    ) -> None:
        if method == INITIALIZE or method in PROXY_INITIALIZE:
            self._initialize(msg, method, raw_id, key, batch)
            return
        if not self.initialized and not self.initializing:
            if raw_id is not None:
                self._reply(
                    self.editor,
                    batch,
                    wire.error_response(
                        raw_id,
                        INVALID_REQUEST,
                        "Not initialized",
                        f"send initialize before {method!r}",
                    ),
                )
            elif method != CANCEL:
                log.warning("editor notification %r before initialize (dropped)", method)
            return
        self._route(self.editor, 1, False, method, raw_id, key, msg, None, batch)

    # -------------------------------------------------------- initialization

    def _initialize(
        self, msg: Message, method: str, raw_id: bytes | None, key: Any, batch: Batch | None
    ) -> None:
        editor = self.editor
        if raw_id is None:
            log.warning("editor sent %s as a notification (dropped)", method)
            return

        def reject(code: int, message: str, data: str) -> None:
            self._reply(editor, batch, wire.error_response(raw_id, code, message, data))

        if method in PROXY_INITIALIZE and not self.proxy_mode:
            reject(
                INVALID_REQUEST,
                "Invalid Request",
                f"{method} is sent by a conductor to a proxy; this chain has an agent",
            )
            return
        if method == INITIALIZE and self.proxy_mode:
            reject(
                INVALID_REQUEST,
                "Invalid Request",
                "this chain has no [agent], so it runs as a proxy and expects _proxy/initialize from its conductor",
            )
            return
        if self.initialized or self.initializing:
            reject(
                INVALID_REQUEST,
                "Invalid Request",
                "already initialized" if self.initialized else "initialize already in progress",
            )
            return
        found = msg.inner("params")
        raw_version = None
        if found is not None:
            spans, _ = found
            span = spans.get("protocolVersion")
            if span is not None:
                raw_version = msg.raw[span[0] : span[1]]
        version = None if raw_version is None else wire.raw_integer(raw_version)
        if version is None or version < 0:
            shown = "missing" if raw_version is None else raw_version.decode(errors="replace")
            reject(
                INVALID_PARAMS,
                "Invalid params",
                f"params.protocolVersion must be a non-negative integer (got {shown})",
            )
            return
        if version == 0:
            reject(
                INVALID_REQUEST,
                "Invalid Request",
                "protocolVersion 0 is not a protocol version; use 1 or 2",
            )
            return
        params = msg.raw_member("params")
        assert params is not None and found is not None
        if version > 2:  # pinned: the conductor speaks v2 at most
            start, end = found[0]["protocolVersion"]
            p_start, p_end = msg.spans["params"]
            params = msg.raw[p_start:start] + b"2" + msg.raw[end:p_end]
            version = 2
        if proxy_dialect := (method if method in PROXY_INITIALIZE else None):
            editor.use_dialect(proxy_dialect)
        if not self.started:
            try:
                self._start()
            except SpawnError as exc:
                reject(INTERNAL_ERROR, "Internal error", str(exc))
                return
        self.version = version
        self.initializing = True
        route = Route(editor, raw_id, key, batch, expect_version=version)
        if batch is not None:
            batch.expected += 1
        editor.incoming[key] = self._send_initialize(1, route, params)

    def _send_initialize(
        self, node: int, route: Route, params: bytes | None, sender: int | None = None
    ) -> tuple[Link, int, str]:
        """Deliver an initialize request going down to `node`, in the form that node expects."""
        target = self.nodes[node]
        route.reply_side = AGENT
        host = target.host
        sender = node - 1 if sender is None else sender
        if host is not None:
            host.ctx.protocol_version = self.version
            if self._transparent(host, INITIALIZE, EDITOR, True):
                return self._send_initialize(node + 1, route, params, sender)
        if self.trace is not None:
            shown = None if params is None else orjson.loads(params)
            self.trace.message(
                self._label(sender), self._label(node), target.next_id + 1, INITIALIZE, shown
            )
        if host is not None:
            target.allocate(route)
            message = make_message(
                target.next_id, INITIALIZE, None if params is None else orjson.loads(params)
            )
            host.receive(EDITOR, message, params)
            return target, target.next_id, EDITOR
        if node == self.last:
            if self.proxy_mode:
                line_id = target.allocate(route)
                target.send(wire.envelope(line_id, target.wrapper, b'"initialize"', params)[:-1])
                return target, target.next_id, EDITOR
            route.expect_version = self.version
            line_id = target.allocate(route)
            target.send(wire.request(line_id, b'"initialize"', params)[:-1])
            return target, target.next_id, EDITOR
        if target.dialect == "legacy":
            # The older draft: a plain initialize that offers the proxy role in _meta.
            route.legacy_init = True
            line_id = target.allocate(route)
            target.send(wire.request(line_id, b'"initialize"', _legacy_offer(params))[:-1])
            return target, target.next_id, EDITOR
        if target.dialect == "auto" and target.init_method == UNDERSCORE[0]:
            route.retry = (node, params)
        line_id = target.allocate(route)
        target.send(wire.request(line_id, target.init_method, params)[:-1])
        return target, target.next_id, EDITOR

    # --------------------------------------------------------------- routing

    def _unwrap(
        self, link: Link, msg: Message, raw_id: bytes | None, key: Any, batch: Batch | None
    ) -> None:
        """A successor envelope: the inner message goes one step further down (or up, in proxy mode)."""
        found = msg.inner("params")
        inner_method = None if found is None else found[1].get("method")
        if found is None or type(inner_method) is not str:
            self._envelope_error(
                link, raw_id, "the envelope's params must carry the wrapped 'method' as a string"
            )
            return
        spans, envelope = found
        inner_params = envelope.get("params")
        params_raw = None
        if inner_params is not None:
            if type(inner_params) not in (dict, list):
                self._envelope_error(
                    link, raw_id, "the wrapped 'params' must be an object or an array"
                )
                return
            span = spans["params"]
            params_raw = msg.raw[span[0] : span[1]]
        method_raw = msg.raw[spans["method"][0] : spans["method"][1]]
        if link is self.editor:  # proxy mode: a message from our successor, going up
            target, upward = self.last - 1, True
        else:
            target, upward = self._node_of[link] + 1, False
        if inner_method in PROXY_INITIALIZE:
            self._envelope_error(
                link, raw_id, f"{inner_method} is sent only by a conductor", INVALID_REQUEST
            )
            return
        if inner_method == INITIALIZE and not upward and raw_id is not None:
            if link.dialect == "legacy" and params_raw is not None:
                params_raw = _legacy_withdraw(params_raw, "params")
            route = Route(link, raw_id, key)
            link.incoming[key] = self._send_initialize(target, route, params_raw)
            return
        inner = Inner(inner_method, method_raw, inner_params, params_raw)
        self._route(link, target, upward, inner_method, raw_id, key, msg, inner, batch)

    def _envelope_error(
        self, link: Link, raw_id: bytes | None, why: str, code: int = INVALID_PARAMS
    ) -> None:
        if raw_id is None:
            log.warning("%s sent an invalid successor envelope (dropped): %s", link.name, why)
        else:
            data = {"component": self._link_label(link, True), "reason": why}
            link.send(wire.error_response(raw_id, code, "Invalid successor envelope", data)[:-1])

    @staticmethod
    def _transparent(host: PluginHost, method: str, side: str, is_request: bool) -> bool:
        """Whether a message may pass an in-process plugin without visiting it.

        Nothing it does could tell: it has no hook for the message, nothing from
        that side is waiting in its queue (order), and for a request, no hook on
        the reply's way back that the reply could overtake.
        """
        if host.wants(method) or host.queued[side]:
            return False
        if is_request:
            return not (host.hooks_toward_editor if side == EDITOR else host.hooks_toward_agent)
        return True

    def _route(
        self,
        source: Link,
        node: int,
        upward: bool,
        method: str,
        raw_id: bytes | None,
        key: Any,
        msg: Message,
        inner: Inner | None,
        batch: Batch | None,
    ) -> None:
        """Deliver one logical message from `source` to `node`.

        The message is `msg` itself (re-addressed by splicing its id), or the
        `inner` message of the successor envelope `msg`.
        """
        if method == CANCEL:
            self._cancel(source, msg, inner)
            return
        sender = node + 1 if upward else node - 1
        params = msg.obj.get("params") if inner is None else inner.params
        addressed = False  # routed to a node by name: no plugin on the way may be skipped past it
        if method == MCP_MESSAGE and type(params) is dict:
            provider = self._mcp_provider(source, sender, raw_id, key, params, batch)
            if provider is None:
                return
            node, upward, addressed = provider, provider < sender, True
        elif method in SESSION_SETUP and type(params) is dict:
            self._learn_mcp_servers(sender, params)
        side = AGENT if upward else EDITOR  # where it comes from, seen from the target
        target = self.nodes[node]
        host = target.host
        while (
            host is not None
            and not addressed
            and (host.inert or self._transparent(host, method, side, raw_id is not None))
        ):
            node += -1 if upward else 1
            target = self.nodes[node]
            host = target.host
        new_id = None
        if raw_id is not None:
            route = Route(source, raw_id, key, batch, reply_side=EDITOR if upward else AGENT)
            if method == MCP_MESSAGE and type(params) is dict:
                route.mcp_key = _mcp_key(params)
            if batch is not None:
                batch.expected += 1
            if target.failure is not None:
                self._fail_route(route, target.failure)
                return
            new_id = target.allocate(route)
            source.incoming[key] = (target, target.next_id, side)
        elif target.failure is not None:
            return
        if self.trace is not None:
            shown = msg.obj.get("params") if inner is None else inner.params
            if raw_id is not None:
                route.session = session_of(shown)
            request_id = target.next_id if raw_id is not None else None
            self.trace.message(self._label(sender), self._label(node), request_id, method, shown)
        if host is not None:
            if inner is None:
                params, raw = msg.obj.get("params"), None
            else:
                params, raw = inner.params, inner.params_raw
            if raw is None and params is not None:
                # Its exact bytes travel on if no hook changes it (fidelity).
                raw = msg.raw_member("params")
            request_id = target.next_id if raw_id is not None else None
            host.receive(side, make_message(request_id, method, params), raw)
            return
        wrap = (upward and target.is_proxy) or (
            not upward and self.proxy_mode and node == self.last
        )
        if inner is None:
            if not wrap:
                target.send(msg.with_id(new_id) if new_id is not None else msg.raw)
                return
            method_raw = msg.raw_member("method")
            params_raw = msg.raw_member("params") if msg.obj.get("params") is not None else None
            assert method_raw is not None
        else:
            method_raw, params_raw = inner.method_raw, inner.params_raw
        if wrap:
            wrapper = target.wrapper_for(new_id is not None)
            target.send(wire.envelope(new_id, wrapper, method_raw, params_raw)[:-1])
        else:
            target.send(wire.request(new_id, method_raw, params_raw)[:-1])

    # ------------------------------------------------------------ MCP over ACP

    def _learn_mcp_servers(self, sender: int, params: dict[str, Any]) -> None:
        """Remember who first put each `acp` MCP server declaration on the wire."""
        servers = params.get("mcpServers")
        if type(servers) is not list:
            return
        for server in servers:
            if type(server) is dict and server.get("type") == "acp":
                server_id = server.get("serverId")
                if isinstance(server_id, str) and server_id not in self.mcp_providers:
                    self.mcp_providers[server_id] = sender
                    log.info("MCP server %r is provided by %s", server_id, self._label(sender))

    def _mcp_provider(
        self,
        source: Link,
        sender: int,
        raw_id: bytes | None,
        key: Any,
        params: dict[str, Any],
        batch: Batch | None,
    ) -> int | None:
        """Where an `mcp/message` goes: a request to the server's provider, a notification
        to the provider (from its consumer) or to the consumer (from its provider)."""
        server_id = params.get("serverId")
        if raw_id is None:
            consumer = self.mcp_open.get(_mcp_key(params))
            if consumer is not None and consumer != sender:
                return consumer
            provider = self.mcp_providers.get(server_id)  # type: ignore[arg-type]
            if provider is None:
                log.warning(
                    "%s sent mcp/message for unknown server %r (dropped)", source.name, server_id
                )
            return provider
        provider = self.mcp_providers.get(server_id) if isinstance(server_id, str) else None
        if provider is None:
            data = {"serverId": server_id, "known": sorted(self.mcp_providers)}
            message = f"Unknown MCP server {server_id!r}"
            if source is self.editor:
                self._reply(
                    source, batch, wire.error_response(raw_id, UNKNOWN_MCP_SERVER, message, data)
                )
                return None
            error = {"code": UNKNOWN_MCP_SERVER, "message": message, "data": data}
            if self.trace is not None:
                self.trace.response("conductor", self._label(sender), key, error, True, None)
            if source.host is not None:
                source.host.receive(AGENT, {"jsonrpc": "2.0", "id": key, "error": error})
            else:
                source.send(wire.error_response(raw_id, UNKNOWN_MCP_SERVER, message, data)[:-1])
            return None
        self.mcp_open[_mcp_key(params)] = sender
        return provider

    def _cancel(self, source: Link, msg: Message, inner: Inner | None) -> None:
        """Hop-by-hop cancellation: cancel our own request on the next hop, never theirs."""
        params: Any = msg.obj.get("params") if inner is None else inner.params
        request_id = params.get("requestId") if type(params) is dict else None
        if type(request_id) not in (int, str):
            log.warning("%s sent $/cancel_request without a valid requestId (dropped)", source.name)
            return
        forwarded = source.incoming.get(request_id)
        if forwarded is None:
            log.debug("%s cancelled %r, which is not in flight (dropped)", source.name, request_id)
            return
        target, our_id, side = forwarded
        if target.failure is not None:
            return
        if self.trace is not None:
            self.trace.message(
                self._link_label(source, side == AGENT),
                self._link_label(target, side == EDITOR),
                None,
                CANCEL,
                {"requestId": our_id},
            )
        if target.host is not None:
            target.host.receive(side, make_message(None, CANCEL, {"requestId": our_id}))
            return
        # Plain, whichever side the request came from: cancellation is hop-by-hop, and the
        # ids the conductor gives a component are unique across both of its sides.
        target.send(
            b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":%d}}' % our_id
        )

    # ------------------------------------------------------- in-process plugins

    def receive_from_plugin(
        self, link: Link, to: str, message: dict[str, Any], raw: bytes | None
    ) -> None:
        """Route a message an in-process plugin sent toward side `to` (no JSON involved)."""
        msg = Message(None, message, raw)
        method = message.get("method")
        if method is None:
            self._response(link, msg)
            return
        has_id = "id" in message
        key = message.get("id")
        raw_id = wire.encode_id(key) if has_id else None
        node = self._node_of[link]
        if to == AGENT:
            if method == INITIALIZE and raw_id is not None:
                params = message.get("params")
                params_raw = raw if raw is not None or params is None else orjson.dumps(params)
                route = Route(link, raw_id, key)
                link.incoming[key] = self._send_initialize(node + 1, route, params_raw)
                return
            self._route(link, node + 1, False, method, raw_id, key, msg, None, None)
        else:
            self._route(link, node - 1, True, method, raw_id, key, msg, None, None)

    # -------------------------------------------------------------- responses

    def _response(self, link: Link, msg: Message) -> None:
        key = msg.obj["id"]
        route = link.pending.pop(key, None) if type(key) is int else None
        if route is None:
            log.warning("%s answered an unknown request id %r (dropped)", link.name, key)
            return
        origin = route.origin
        origin.incoming.pop(route.origin_key, None)
        if route.mcp_key is not None:
            self.mcp_open.pop(route.mcp_key, None)
        if route.retry is not None and _error_code(msg) == METHOD_NOT_FOUND:
            self._fall_back(link, route)
            return
        if route.legacy_init:
            msg = self._legacy_accepted(link, msg)
        if route.expect_version is not None and self._version_mismatch(link, msg, route):
            return
        if self.trace is not None:
            is_error = "error" in msg.obj
            self.trace.response(
                self._link_label(link, route.reply_side == AGENT),
                self._link_label(origin, route.reply_side == EDITOR),
                key,
                msg.obj.get("error" if is_error else "result"),
                is_error,
                route.session,
                "acp" if route.mcp_key is None else "mcp",
            )
        if origin.host is not None:
            payload = "error" if "error" in msg.obj else "result"
            raw = msg.raw_member(payload)
            response = {"jsonrpc": "2.0", "id": route.origin_key, payload: msg.obj.get(payload)}
            origin.host.receive(route.reply_side, response, raw)
            return
        line = msg.with_id(route.origin_id)
        if route.batch is not None:
            route.batch.add(line)
        else:
            origin.send(line)

    def _fall_back(self, link: Link, route: Route) -> None:
        """dialect = "auto": the proxy does not know _proxy/initialize; try proxy/initialize."""
        node, params = route.retry  # type: ignore[misc]
        log.info(
            "%s answered -32601 to _proxy/initialize; retrying with proxy/initialize", link.name
        )
        link.init_method, link.wrapper = PLAIN
        route.retry = None
        route.origin.incoming[route.origin_key] = self._send_initialize(node, route, params)

    def _version_mismatch(self, link: Link, msg: Message, route: Route) -> bool:
        result = msg.obj.get("result")
        if route.origin is self.editor:
            self.initializing = False
        if type(result) is not dict:
            return False
        answered = result.get("protocolVersion")
        if answered == route.expect_version and type(answered) is int:
            if route.origin is self.editor:
                self.initialized = True
            return False
        data = {
            "component": link.name,
            "selected": route.expect_version,
            "answered": answered,
        }
        text = (
            f"protocol version mismatch: {link.name} answered protocolVersion {answered!r}, "
            f"but the conductor selected {route.expect_version}"
        )
        log.error(text)
        self._send_error(route, INTERNAL_ERROR, text, data)
        return True

    def _send_error(self, route: Route, code: int, message: str, data: Any) -> None:
        """Answer the origin of `route` with an error the conductor itself raises."""
        origin = route.origin
        if self.trace is not None:
            error = {"code": code, "message": message, "data": data}
            target = self._link_label(origin, route.reply_side == EDITOR)
            self.trace.response("conductor", target, route.origin_key, error, True, route.session)
        if origin.host is not None:
            error = {"code": code, "message": message, "data": data}
            response = {"jsonrpc": "2.0", "id": route.origin_key, "error": error}
            origin.host.receive(route.reply_side, response)
            return
        line = wire.error_response(route.origin_id, code, message, data)[:-1]
        if route.batch is not None:
            route.batch.add(line)
        else:
            origin.send(line)

    def _legacy_accepted(self, link: Link, msg: Message) -> Message:
        """An older-draft proxy's initialize answer: it must accept the proxy role, which is
        hop-local, so the acceptance is taken out of the result passed on."""
        result = msg.obj.get("result")
        if type(result) is not dict:
            return msg
        meta = result.get("_meta")
        if type(meta) is not dict or meta.get("proxy") is not True:
            error = {
                "code": INVALID_REQUEST,
                "message": f"proxy {link.name!r} did not accept the proxy role (dialect = legacy)",
                "data": {"component": link.name},
            }
            return Message(None, {"jsonrpc": "2.0", "id": msg.obj["id"], "error": error})
        raw = msg.raw_member("result")
        assert raw is not None
        result_raw = _legacy_withdraw(raw, "result")
        return Message(None, {**msg.obj, "result": orjson.loads(result_raw)}, result_raw)

    # ---------------------------------------------------------------- failure

    def link_failed(self, link: Link, cause: dict[str, Any]) -> None:
        """`link` is gone: answer every request pending on it with the cause."""
        link.failure = cause
        routes = list(link.pending.values())
        link.pending.clear()
        for route in routes:
            self._fail_route(route, cause)

    def fail_all(self, cause: dict[str, Any]) -> None:
        """The chain is shutting down: answer everything the editor still waits for."""
        for _key, (target, our_id, _side) in list(self.editor.incoming.items()):
            route = target.pending.pop(our_id, None)
            if route is not None:
                self._fail_route(route, cause)

    def _fail_route(self, route: Route, cause: dict[str, Any]) -> None:
        route.origin.incoming.pop(route.origin_key, None)
        if route.mcp_key is not None:
            self.mcp_open.pop(route.mcp_key, None)
        if route.origin.failure is not None:
            return
        if route.origin is self.editor and route.expect_version is not None:
            self.initializing = False
        self._send_error(route, INTERNAL_ERROR, cause["message"], cause)


class Inner:
    """The message inside a successor envelope: parsed values and their exact bytes."""

    __slots__ = ("method", "method_raw", "params", "params_raw")

    def __init__(
        self, method: str, method_raw: bytes, params: Any, params_raw: bytes | None
    ) -> None:
        self.method = method
        self.method_raw = method_raw
        self.params = params
        self.params_raw = params_raw


def _legacy_offer(params: bytes | None) -> bytes:
    """Initialize params with `_meta.proxy: true` (the older draft's proxy role offer)."""
    value = {} if params is None else orjson.loads(params)
    meta = value.get("_meta")
    value["_meta"] = {**(meta if type(meta) is dict else {}), "proxy": True}
    return orjson.dumps(value)


def _legacy_withdraw(payload: bytes, what: str) -> bytes:
    """The payload without `_meta.proxy` (hop-local in the older draft); re-encoded only
    when it is there."""
    value = orjson.loads(payload)
    meta = value.get("_meta") if type(value) is dict else None
    if type(meta) is not dict or "proxy" not in meta:
        return payload
    rest = {k: v for k, v in meta.items() if k != "proxy"}
    if rest:
        value["_meta"] = rest
    else:
        del value["_meta"]
    log.debug("removed the hop-local _meta.proxy from an initialize %s", what)
    return orjson.dumps(value)


def _mcp_key(params: dict[str, Any]) -> tuple[str, str]:
    """(serverId, requestId) of an mcp/message, hashable whatever the peer sent."""
    return repr(params.get("serverId")), repr(params.get("requestId"))


def _error_code(msg: Message) -> Any:
    error = msg.obj.get("error")
    return error.get("code") if type(error) is dict else None
