"""Routing between the editor, the proxies and the agent, as a plain state machine.

The router owns no I/O. It is fed one line at a time with the link it came
from (or a message object from an in-process plugin), and answers by handing
messages to links: a byte link encodes them, a plugin link's host may pass
them on, hold them or answer them. What it needs done outside itself (start
the chain's components) it emits as an effect, and the driver reports back.
The runtime decides how bytes move; this module decides where they go.

Positions: node 0 is the editor, nodes 1..k the proxies, node k+1 the agent.
In proxy mode (no agent) node k+1 is the conductor's own successor, reached
through the editor link with messages wrapped in the successor envelope.

A message walks from node to node: an in-process plugin with no hook for it
(and nothing queued from that side) is passed without a visit, one whose hook
cannot suspend is visited in passing, and the walk ends at the first byte link
(or a plugin that holds it). Ids are allocated only where a message is
delivered, so each reply travels straight back to its origin, waiting only
behind what a plugin on the way still has queued from that side.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from . import wire
from .links import Answer, ByteLink, Link, NodeHost, Transit
from .protocol import (
    AGENT,
    CANCEL,
    EDITOR,
    INITIALIZE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LEGACY_NOTIFICATION,
    LEGACY_REQUEST,
    MCP_MESSAGE,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PLAIN_WIRE,
    PROXY_INITIALIZE,
    SESSION_SETUP,
    SUCCESSOR,
    UNDERSCORE_WIRE,
    UNKNOWN_MCP_SERVER,
    Dialect,
)
from .trace import session_of

log = logging.getLogger("conductor")

__all__ = ["START_CHAIN", "Observer", "Router", "SpawnError"]

START_CHAIN = "start the chain"  # the effect: spawn the components, then call `started`
# Methods the router itself looks into (everything else it only re-addresses).
_ROUTED = (
    frozenset({CANCEL, MCP_MESSAGE, INITIALIZE}) | SESSION_SETUP | PROXY_INITIALIZE | SUCCESSOR
)


class SpawnError(Exception):
    """Starting the chain's components failed; the message names the component."""


class Observer(Protocol):
    """Sees every logical message as it is routed (the `--trace` writer)."""

    def message(
        self, sender: str, receiver: str, request_id: Any, method: str, params: Any
    ) -> None: ...

    def response(
        self,
        sender: str,
        receiver: str,
        request_id: Any,
        payload: Any,
        is_error: bool,
        session: str | None,
        protocol: str = "acp",
    ) -> None: ...

    def new_batch(self) -> None: ...

    def end_batch(self) -> None: ...


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
            assert isinstance(self.link, ByteLink)
            self.link.send(b"[" + b",".join(self.responses) + b"]")
            self.expected = 0


class Router:
    """Routes every message between the links of one chain instance."""

    def __init__(
        self,
        editor: ByteLink,
        proxy_mode: bool,
        emit: Callable[[str], None],
        observer: Observer | None = None,
    ) -> None:
        self.editor = editor
        self.proxy_mode = proxy_mode
        self._emit = emit
        self.observer = observer
        self.nodes: list[Link] = [editor]
        self.hosts: list[NodeHost] = []
        self.starting = False
        self.started = False
        self.initialized = False
        self.initializing = False
        self.version: int | None = None
        self._node_of: dict[Link, int] = {editor: 0}
        self._first: Transit | None = None  # the initialize waiting for the chain to start
        self._held: list[bytes] = []  # editor lines that came while the chain was starting
        self.mcp_providers: dict[str, int] = {}  # serverId -> node that declared it first
        self.mcp_open: dict[tuple[str, str], int] = {}  # (serverId, requestId) -> consumer node

    # ----------------------------------------------------------------- setup

    def chain_started(self, links: list[Link]) -> None:
        """The driver started the components for `START_CHAIN`: the initialize goes on."""
        self.nodes = [self.editor, *links]
        if self.proxy_mode:
            self.nodes.append(self.editor)
        inner = self.nodes[1:-1] if self.proxy_mode else self.nodes[1:]
        for index, link in enumerate(inner, 1):
            self._node_of[link] = index
            host = link.host
            if host is not None:
                host.attach(self, link)
                host.ctx.protocol_version = self.version
                self.hosts.append(host)
        self.starting = False
        self.started = True
        first, self._first = self._first, None
        if first is not None:
            self._walk(first, 1)
        self._replay()

    def chain_failed(self, why: str) -> None:
        """The components could not be started: the initialize is answered with `why`."""
        self.starting = False
        self.initializing = False
        first, self._first = self._first, None
        if first is not None:
            self._conductor_error(first, INTERNAL_ERROR, "Internal error", why)
        self._replay()

    def _replay(self) -> None:
        held, self._held = self._held, []
        for line in held:
            self.receive(self.editor, line)

    @property
    def last(self) -> int:
        return len(self.nodes) - 1

    def _link_label(self, link: Link, below: bool) -> str:
        """A link's name in traces; in proxy mode the editor link is also our successor."""
        if link is self.editor:
            return "successor" if self.proxy_mode and below else "editor"
        return link.name

    def _label(self, node: int) -> str:
        return self._link_label(self.nodes[node], node == self.last and node > 0)

    # ------------------------------------------------------------- receiving

    def receive(self, link: Link, line: bytes) -> None:
        """Route one line that arrived on `link`."""
        if self.starting and link is self.editor:
            self._held.append(line)
            return
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:
                obj = wire.parse(line)
            except wire.ParseError as exc:
                self._unparsable(link, line, exc)
                return
        if type(obj) is dict:
            self._dispatch(link, wire.Message(line, obj), None)
        elif type(obj) is list:
            self._batch(link, line, obj)
        else:
            self._invalid(link, None, b"null", "a JSON-RPC message must be an object or an array")

    def _unparsable(self, link: Link, line: bytes, exc: Exception) -> None:
        if not line or line.isspace():
            return  # a blank line is no message (framing hands them over unfiltered)
        if link is self.editor:
            self.editor.send(wire.error_response(b"null", PARSE_ERROR, "Parse error", str(exc)))
        else:
            log.warning("%s wrote a line that is not JSON (dropped): %.200r", link.name, line)

    def _batch(self, link: Link, line: bytes, items: list[Any]) -> None:
        if not items:
            self._invalid(link, None, b"null", "empty batch")
            return
        batch = Batch(link) if link is self.editor else None
        observer = self.observer
        if observer is not None:
            observer.new_batch()
        for (start, end), obj in zip(wire.array_items(line), items, strict=True):
            if type(obj) is dict:
                self._dispatch(link, wire.Message(line[start:end], obj), batch)
            else:
                self._invalid(link, batch, b"null", "a batch entry must be an object")
        if batch is not None:
            batch.seal()
        if observer is not None:
            observer.end_batch()

    def _invalid(self, link: Link, batch: Batch | None, raw_id: bytes, why: str) -> None:
        if link is self.editor:
            self._reply(batch, wire.error_response(raw_id, INVALID_REQUEST, "Invalid Request", why))
        else:
            log.warning("%s sent an invalid message (dropped): %s", link.name, why)

    def _reply(self, batch: Batch | None, line: bytes) -> None:
        """Send the editor a response the conductor itself produced (to a request it could
        not route, so no transit exists for it)."""
        if self.observer is not None:
            obj = orjson.loads(line)
            self.observer.response("conductor", "editor", obj["id"], obj["error"], True, None)
        if batch is not None:
            batch.expected += 1
            batch.add(line)
        else:
            self.editor.send(line)

    def _dispatch(self, link: Link, msg: wire.Message, batch: Batch | None) -> None:
        obj = msg.obj
        method = obj.get("method")
        if method is None:
            if "id" in obj and ("result" in obj or "error" in obj):
                self._response(link, msg)
            else:
                shown = msg.raw_id() if "id" in obj else b"null"
                self._invalid(link, batch, shown, "not a request, notification or response")
            return
        raw_id: bytes | None = None
        key = None
        if "id" in obj:
            key = obj["id"]
            raw_id = msg.raw_id()
            if (
                type(key) not in (int, str)
                and key is not None
                and not (type(key) is float and raw_id.lstrip(b"-").isdigit())  # a huge integer
            ):
                self._invalid(link, batch, raw_id, "'id' must be a number or string")
                return
        if type(method) is not str:
            self._invalid(link, batch, raw_id or b"null", "'method' must be a string")
            return
        params = obj.get("params")
        if params is not None and type(params) not in (dict, list):
            why = "'params' must be an object or an array"
            if raw_id is not None and link is not self.editor:
                # A component's request: answered, or it would wait for ever.
                log.warning("%s sent an invalid request: %s", link.name, why)
                self._refuse(link, raw_id, why, INVALID_REQUEST)
            else:
                self._invalid(link, batch, raw_id or b"null", why)
            return

        if link is self.editor and not (self.proxy_mode and method in SUCCESSOR):
            self._from_editor(msg, method, raw_id, key, params, batch)
            return
        if (method in SUCCESSOR and link.is_proxy) or link is self.editor:
            self._unwrap(link, msg, raw_id, key)
            return
        node = self._node_of.get(link)
        if node is None:
            log.warning("message from %s, which is not in the chain (dropped)", link.name)
        elif method in PROXY_INITIALIZE:
            # Only a conductor sends it; a proxy's plain one would go to its predecessor.
            self._refuse(link, raw_id, f"{method} is sent only by a conductor", INVALID_REQUEST)
        elif raw_id is None and method not in _ROUTED and self._plain_next(node - 1):
            # A plain notification to a byte link next door: it goes as it came (the hot path).
            target = self.nodes[node - 1]
            assert isinstance(target, ByteLink)
            if target.is_proxy:
                wrapper = target.wrapper_for(False)
                line = wire.wrap_notification(msg, wrapper)
                if line is None:
                    method_raw = msg.member("method")
                    assert method_raw is not None
                    params_raw = None if params is None else msg.member("params")
                    line = wire.envelope(None, wrapper, method_raw, params_raw)
                target.send(line)
            else:
                target.send(msg.raw)
        else:
            # A plain message from a component goes to its predecessor.
            t = Transit(link, node, True, method, key, raw_id, params, msg, size=len(msg.raw))
            self._route(t, node - 1)

    def _wraps_down(self, node: int) -> bool:
        """Whether a message going down to `node` is wrapped (it is our own successor)."""
        return self.proxy_mode and node == self.last

    def _plain_next(self, node: int) -> bool:
        """Whether a message can be handed to `node` without a walk: a live byte link, and
        nobody watching."""
        link = self.nodes[node]
        return link.host is None and link.failure is None and self.observer is None

    def _from_editor(
        self,
        msg: wire.Message,
        method: str,
        raw_id: bytes | None,
        key: Any,
        params: Any,
        batch: Batch | None,
    ) -> None:
        if method == INITIALIZE or method in PROXY_INITIALIZE:
            self._initialize(msg, method, raw_id, key, batch)
            return
        if not self.initialized and not self.initializing:
            if raw_id is not None:
                self._reply(
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
        if (
            batch is None
            and method not in _ROUTED
            and self._plain_next(1)
            and not self._wraps_down(1)
        ):
            # To a byte link next door, as it came with only its id replaced (the hot path).
            target = self.nodes[1]
            assert isinstance(target, ByteLink)
            if raw_id is None:
                target.send(msg.raw)
                return
            t = Transit(self.editor, 0, False, method, key, raw_id, None, None)
            target.next_id = our_id = target.next_id + 1
            target.pending[our_id] = t
            self.editor.incoming[key] = (target, our_id, EDITOR)
            target.send(msg.with_id(b"%d" % our_id))
            return
        t = Transit(self.editor, 0, False, method, key, raw_id, params, msg, size=len(msg.raw))
        t.batch = batch
        self._route(t, 1)

    # -------------------------------------------------------- initialization

    def _initialize(
        self, msg: wire.Message, method: str, raw_id: bytes | None, key: Any, batch: Batch | None
    ) -> None:
        editor = self.editor
        if raw_id is None:
            log.warning("editor sent %s as a notification (dropped)", method)
            return

        def reject(code: int, message: str, data: str) -> None:
            self._reply(batch, wire.error_response(raw_id, code, message, data))

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
                "this chain has no [agent], so it runs as a proxy and expects _proxy/initialize "
                "from its conductor",
            )
            return
        if self.initialized or self.initializing:
            reject(
                INVALID_REQUEST,
                "Invalid Request",
                "already initialized" if self.initialized else "initialize already in progress",
            )
            return
        params = msg.obj.get("params")
        params_raw = msg.member("params") if params is not None else None
        raw_version = None
        version_span = None
        if type(params) is dict and "protocolVersion" in params:
            assert params_raw is not None
            version_span = wire.members(params_raw, None, len(params))["protocolVersion"]
            raw_version = params_raw[version_span[0] : version_span[1]]
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
        assert params_raw is not None and version_span is not None
        if version > 2:  # pinned: the conductor speaks v2 at most
            start, end = version_span
            params_raw = params_raw[:start] + b"2" + params_raw[end:]
            params = {**params, "protocolVersion": 2}  # type: ignore[dict-item]
            version = 2
        if method in PROXY_INITIALIZE:
            editor.init_method, editor.wrapper = UNDERSCORE_WIRE if method[0] == "_" else PLAIN_WIRE
        self.version = version
        self.initializing = True
        t = Transit(editor, 0, False, INITIALIZE, key, raw_id, params, None, params_raw=params_raw)
        t.batch = batch
        t.expect_version = version
        if batch is not None:
            batch.expected += 1
        if self.started:
            self._walk(t, 1)
            return
        self.starting = True
        self._first = t
        self._emit(START_CHAIN)

    def _deliver_initialize(self, link: Link, node: int, t: Transit) -> tuple[bytes, bytes | None]:
        """The method and params an initialize travelling down takes at `link`."""
        if node == self.last:
            if self.proxy_mode:
                return b'"initialize"', t.params_raw
            t.expect_version = self.version
            return b'"initialize"', t.params_raw
        if link.dialect == Dialect.LEGACY:
            # The older draft: a plain initialize that offers the proxy role in _meta.
            t.legacy_init = True
            return b'"initialize"', _legacy_offer(t.params_raw)
        if link.dialect == Dialect.AUTO and link.init_method == UNDERSCORE_WIRE[0]:
            t.retry = (node, t.params_raw)
        return link.init_method, t.params_raw

    # --------------------------------------------------------------- routing

    def _unwrap(self, link: Link, msg: wire.Message, raw_id: bytes | None, key: Any) -> None:
        """A successor envelope: the inner message goes one step further down (or up, in
        proxy mode, where the envelope comes from our own successor)."""
        method = msg.obj["method"]
        if method in (LEGACY_REQUEST, LEGACY_NOTIFICATION):
            link.dialect = Dialect.LEGACY
        elif link.dialect != Dialect.LEGACY and (link.wrapper[1] == 0x5F) != (method[0] == "_"):
            link.init_method, link.wrapper = UNDERSCORE_WIRE if method[0] == "_" else PLAIN_WIRE
        envelope = msg.obj.get("params")
        inner_method = envelope.get("method") if type(envelope) is dict else None
        if type(inner_method) is not str:
            self._refuse(
                link, raw_id, "the envelope's params must carry the wrapped 'method' as a string"
            )
            return
        assert type(envelope) is dict
        inner_params = envelope.get("params")
        if inner_params is not None and type(inner_params) not in (dict, list):
            self._refuse(link, raw_id, "the wrapped 'params' must be an object or an array")
            return
        if inner_method in PROXY_INITIALIZE:
            self._refuse(
                link, raw_id, f"{inner_method} is sent only by a conductor", INVALID_REQUEST
            )
            return
        method_raw, params_raw = msg.inner()
        if inner_params is None:
            params_raw = None
        if link is self.editor:  # proxy mode: a message from our successor, going up
            origin, target, upward = self.last, self.last - 1, True
        else:
            origin = self._node_of[link]
            target, upward = origin + 1, False
        if inner_method == INITIALIZE and link.dialect == Dialect.LEGACY and params_raw is not None:
            params_raw = _legacy_withdraw(params_raw, "params")
            inner_params = orjson.loads(params_raw)
        if (
            not upward
            and inner_method not in _ROUTED
            and self._plain_next(target)
            and not self._wraps_down(target)
        ):
            # Down to a byte link next door, unwrapped with its bytes as they came (hot path).
            next_link = self.nodes[target]
            assert isinstance(next_link, ByteLink)
            if raw_id is None:
                next_link.send(wire.request(None, method_raw, params_raw))
                return
            t = Transit(link, origin, False, inner_method, key, raw_id, None, None)
            next_link.next_id = our_id = next_link.next_id + 1
            next_link.pending[our_id] = t
            link.incoming[key] = (next_link, our_id, EDITOR)
            next_link.send(wire.request(b"%d" % our_id, method_raw, params_raw))
            return
        t = Transit(
            link,
            origin,
            upward,
            inner_method,
            key,
            raw_id,
            inner_params,
            None,
            method_raw=method_raw,
            params_raw=params_raw,
            size=len(msg.raw),
        )
        self._route(t, target)

    def _refuse(
        self, link: Link, raw_id: bytes | None, why: str, code: int = INVALID_PARAMS
    ) -> None:
        """A component's message the conductor will not route: a request is answered."""
        if raw_id is None:
            log.warning(
                "%s sent a message the conductor cannot route (dropped): %s", link.name, why
            )
            return
        data = {"component": self._link_label(link, True), "reason": why}
        message = "Invalid successor envelope" if code == INVALID_PARAMS else "Invalid Request"
        if isinstance(link, ByteLink):
            link.send(wire.error_response(raw_id, code, message, data))

    def _route(self, t: Transit, node: int) -> None:
        """Send `t` on its way, starting at `node` (the next one in its direction)."""
        method = t.method
        if t.batch is not None and t.raw_id is not None:
            t.batch.expected += 1
        if method == CANCEL:
            self._cancel(t)
            return
        if method == MCP_MESSAGE and type(t.params) is dict:
            provider = self._mcp_provider(t)
            if provider is None:
                return
            node = provider
            t.upward = provider < t.origin
            t.addressed = True
        self._walk(t, node)

    def _walk(self, t: Transit, node: int) -> None:
        """Move `t` from node to node until a link takes it."""
        nodes = self.nodes
        upward = t.upward
        side = AGENT if upward else EDITOR  # where it comes from, seen from the next node
        step = -1 if upward else 1
        sender = t.origin if t.addressed else node - step  # the last node it was seen at
        setup = t.method in SESSION_SETUP and type(t.params) is dict
        while True:
            link = nodes[node]
            if setup:
                self._learn_mcp_servers(node - step, t.params)
            host = link.host
            if host is None:
                self._deliver(link, node, t, side, sender)
                return
            if self.observer is not None and host.visits(side, t):
                self._observe_visit(t, link, sender, node)
                sender = node
            if not host.offer(side, t):
                return
            t.addressed = False  # passed on by the node it was addressed to: it walks on
            node += step

    def resume(self, link: Link, t: Transit) -> None:
        """A plugin at `link` passed `t` on (after a hook, or once its queue reached it)."""
        t.addressed = False
        self._walk(t, self._node_of[link] + (-1 if t.upward else 1))

    def _deliver(self, link: Link, node: int, t: Transit, side: str, sender: int) -> None:
        """Hand `t` to the byte link at `node`."""
        upward = t.upward
        wrap = (upward and link.is_proxy) or (not upward and self.proxy_mode and node == self.last)
        if t.raw_id is None:
            if link.failure is not None:
                return
            if self.observer is not None:
                self._observe(t, sender, node, None)
            link.deliver(t, None, side, link.wrapper_for(False) if wrap else None)
            return
        if link.failure is not None:
            self._conductor_error(t, INTERNAL_ERROR, link.failure["message"], link.failure)
            return
        our_id = link.allocate(t)
        t.source.incoming[t.key] = (link, our_id, side)
        if t.method == INITIALIZE and not upward:
            method_raw, params_raw = self._deliver_initialize(link, node, t)
            if self.observer is not None:
                self._observe(t, sender, node, our_id)
            wrapper = link.wrapper_for(True) if wrap else None
            line = (
                wire.envelope(str(our_id).encode(), wrapper, method_raw, params_raw)
                if wrapper is not None
                else wire.request(str(our_id).encode(), method_raw, params_raw)
            )
            assert isinstance(link, ByteLink)
            link.send(line)
            return
        if self.observer is not None:
            self._observe(t, sender, node, our_id)
        link.deliver(t, our_id, side, link.wrapper_for(True) if wrap else None)
        t.forget_payload()

    def _observe(self, t: Transit, sender: int, node: int, request_id: int | None) -> None:
        assert self.observer is not None
        if t.raw_id is not None:
            t.session = session_of(t.params)
        self.observer.message(
            self._label(sender), self._label(node), request_id, t.method, t.params
        )

    def _observe_visit(self, t: Transit, link: Link, sender: int, node: int) -> None:
        """A plugin sees `t`: one hop in the trace (with an id only traces use, so the hop's
        request pairs with a response)."""
        hop_id = None
        if t.raw_id is not None:
            link.next_id += 1
            hop_id = link.next_id
            if t.hops is None:
                t.hops = []
            t.hops.append((node, hop_id))
        self._observe(t, sender, node, hop_id)

    def _observe_answer(self, answer: Answer, node: int, hop_id: Any) -> None:
        """The answer's hops in the trace: from `node` (whose request had `hop_id`) back
        through each plugin that saw the request, to its origin."""
        assert self.observer is not None
        t = answer.transit
        protocol = "acp" if t.mcp_key is None else "mcp"
        back = [hop for hop in t.hops or () if hop[0] != node]
        frm, frm_id = node, hop_id
        for to, to_id in [*reversed(back), (t.origin, None)]:
            self.observer.response(
                self._label(frm),
                self._label(to),
                frm_id,
                answer.payload,
                answer.is_error,
                t.session,
                protocol,
            )
            frm, frm_id = to, to_id

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

    def _mcp_provider(self, t: Transit) -> int | None:
        """Where an `mcp/message` goes: a request to the server's provider, a notification
        to the provider (from its consumer) or to the consumer (from its provider)."""
        params = t.params
        server_id = params.get("serverId")
        sender = t.origin
        if t.raw_id is None:
            consumer = self.mcp_open.get(_mcp_key(params))
            if consumer is not None and consumer != sender:
                return consumer
            provider = self.mcp_providers.get(server_id)
            if provider is None:
                log.warning(
                    "%s sent mcp/message for unknown server %r (dropped)", t.source.name, server_id
                )
            elif provider == sender:
                # The provider's own notification for a request no longer open: nobody to tell.
                log.debug("mcp/message notification for a closed request (dropped)")
                return None
            return provider
        provider = self.mcp_providers.get(server_id) if isinstance(server_id, str) else None
        if provider is None:
            data = {"serverId": server_id, "known": sorted(self.mcp_providers)}
            self._conductor_error(t, UNKNOWN_MCP_SERVER, f"Unknown MCP server {server_id!r}", data)
            return None
        t.mcp_key = _mcp_key(params)
        self.mcp_open[t.mcp_key] = sender
        return provider

    # ---------------------------------------------------------- cancellation

    def _cancel(self, t: Transit) -> None:
        """Hop-by-hop cancellation: cancel our own request on the next hop, never theirs."""
        params = t.params
        source = t.source
        request_id = params.get("requestId") if type(params) is dict else None
        if type(request_id) not in (int, str):
            log.warning("%s sent $/cancel_request without a valid requestId (dropped)", source.name)
            return
        forwarded = source.incoming.get(request_id)
        if forwarded is None:
            log.debug("%s cancelled %r, which is not in flight (dropped)", source.name, request_id)
            return
        target, handle, side = forwarded
        if target.failure is not None:
            return
        if self.observer is not None and isinstance(handle, int):
            self.observer.message(
                self._link_label(source, side == AGENT),
                self._link_label(target, side == EDITOR),
                None,
                CANCEL,
                {"requestId": handle},
            )
        target.deliver_cancel(handle, side)

    # ------------------------------------------------------- in-process plugins

    def from_plugin(
        self, link: Link, to: str, method: str, key: Any, params: Any, params_raw: bytes | None
    ) -> None:
        """A message an in-process plugin sends toward side `to`: its own, or one it forwards
        and wants the reply to (`key` is then the plugin's id, None for a notification)."""
        node = self._node_of[link]
        upward = to == EDITOR
        raw_id = None if key is None else wire.dumps(key)
        size = 64 + (0 if params_raw is None else len(params_raw))
        t = Transit(
            link, node, upward, method, key, raw_id, params, None, params_raw=params_raw, size=size
        )
        self._route(t, node - 1 if upward else node + 1)

    def answer(self, t: Transit, link: Link, is_error: bool, payload: Any, raw: bytes) -> None:
        """A plugin at `link` answered `t` (which it holds, or visits in passing)."""
        node = self._node_of[link]
        answer = Answer(t, is_error, payload, raw)
        if self.observer is not None:
            hop_id = next((i for h, i in t.hops or () if h == node), None)
            self._observe_answer(answer, node, hop_id)
        self._return(answer, node)

    def resume_answer(self, link: Link, answer: Answer) -> None:
        """A plugin at `link` let an answer it had queued behind its current call go on."""
        self._return(answer, self._node_of[link], resumed=True)

    def hold(self, t: Transit, link: Link, side: str) -> None:
        """A plugin at `link` holds request `t`: cancels for it now go there."""
        t.source.incoming[t.key] = (link, t, side)  # type: ignore[assignment]

    # -------------------------------------------------------------- responses

    def _response(self, link: Link, msg: wire.Message) -> None:
        obj = msg.obj
        key = obj["id"]
        t = link.pending.pop(key, None) if type(key) is int else None
        if t is None:
            log.warning("%s answered an unknown request id %r (dropped)", link.name, key)
            return
        is_error = "error" in obj
        if t.retry is not None and is_error and _error_code(obj) == METHOD_NOT_FOUND:
            self._fall_back(link, t)
            return
        # In proxy mode the editor link is also node `last`: requests going down went there.
        node = (0 if t.upward else self.last) if link is self.editor else self._node_of[link]
        source = t.source
        if (
            t.batch is None
            and self.observer is None
            and not t.legacy_init
            and t.expect_version is None
            and isinstance(source, ByteLink)
            and (not self.hosts or self._clear_way(t, node))
        ):
            # Nothing to wait behind on the way back: straight to its origin (the hot path).
            self._answered(t)
            if not t.closed and source.failure is None:
                t.closed = True
                source.send(msg.with_id(t.raw_id))  # type: ignore[arg-type]
            return
        answer = Answer(t, is_error, obj["error" if is_error else "result"], None, msg)
        if t.legacy_init:
            answer = self._legacy_accepted(link, answer, msg)
        if t.expect_version is not None and self._version_mismatch(link, answer):
            return
        if self.observer is not None:
            self._observe_answer(answer, node, key)
        self._return(answer, node)

    def _return(self, answer: Answer, node: int, resumed: bool = False) -> None:
        """Move an answer from `node` back to its origin, waiting behind any plugin on the way
        that still has messages queued from that side."""
        t = answer.transit
        if not resumed:
            self._answered(t)
        host = self._busy_on_the_way(t, node)
        if host is not None:
            host.defer_answer(EDITOR if t.upward else AGENT, answer)
            return
        self._finish(answer)

    def _busy_on_the_way(self, t: Transit, node: int) -> NodeHost | None:
        """The first plugin between `node` and `t`'s origin that still has messages queued
        from the side the answer comes from (it must not overtake them)."""
        origin = t.origin
        if t.addressed or node == origin:
            return None
        step = 1 if t.upward else -1  # the answer travels opposite to the request
        side = EDITOR if t.upward else AGENT
        nodes = self.nodes
        for between in range(node + step, origin, step):
            host = nodes[between].host
            if host is not None and host.busy(side):
                return host
        return None

    def _clear_way(self, t: Transit, node: int) -> bool:
        return self._busy_on_the_way(t, node) is None

    def _answered(self, t: Transit) -> None:
        """`t` is answered: nothing it opened stays open (a late cancel finds nothing)."""
        t.source.incoming.pop(t.key, None)
        if t.mcp_key is not None:
            self.mcp_open.pop(t.mcp_key, None)

    def _finish(self, answer: Answer) -> None:
        """Deliver an answer to its origin (a batch collects the editor's)."""
        t = answer.transit
        source = t.source
        if t.closed or source.failure is not None:
            return
        t.closed = True
        if t.batch is not None:
            t.batch.add(answer.encode(t.raw_id))  # type: ignore[arg-type]
            return
        source.deliver_answer(answer)

    def _fall_back(self, link: Link, t: Transit) -> None:
        """dialect = "auto": the proxy does not know _proxy/initialize; try proxy/initialize."""
        node, params = t.retry  # type: ignore[misc]
        log.info(
            "%s answered -32601 to _proxy/initialize; retrying with proxy/initialize", link.name
        )
        link.init_method, link.wrapper = PLAIN_WIRE
        t.retry = None
        t._params_raw = params
        self._deliver(link, node, t, EDITOR, node - 1)

    def _version_mismatch(self, link: Link, answer: Answer) -> bool:
        t = answer.transit
        if t.source is self.editor:
            self.initializing = False
        result = answer.payload
        if answer.is_error or type(result) is not dict:
            return False
        answered = result.get("protocolVersion")
        if answered == t.expect_version and type(answered) is int:
            if t.source is self.editor:
                self.initialized = True
            return False
        data = {"component": link.name, "selected": t.expect_version, "answered": answered}
        text = (
            f"protocol version mismatch: {link.name} answered protocolVersion {answered!r}, "
            f"but the conductor selected {t.expect_version}"
        )
        log.error(text)
        self._conductor_error(t, INTERNAL_ERROR, text, data)
        return True

    def _conductor_error(self, t: Transit, code: int, message: str, data: Any) -> None:
        """Answer `t`'s origin with an error the conductor itself raises."""
        self._answered(t)
        answer = Answer.error(t, code, message, data)
        if self.observer is not None:
            self.observer.response(
                "conductor",
                self._link_label(t.source, t.upward),
                t.key,
                answer.payload,
                True,
                t.session,
            )
        self._finish(answer)

    def _legacy_accepted(self, link: Link, answer: Answer, msg: wire.Message) -> Answer:
        """An older-draft proxy's initialize answer: it must accept the proxy role, which is
        hop-local, so the acceptance is taken out of the result passed on."""
        t = answer.transit
        result = answer.payload
        if answer.is_error or type(result) is not dict:
            return answer
        meta = result.get("_meta")
        if type(meta) is not dict or meta.get("proxy") is not True:
            return Answer.error(
                t,
                INVALID_REQUEST,
                f"proxy {link.name!r} did not accept the proxy role (dialect = legacy)",
                {"component": link.name},
            )
        raw = _legacy_withdraw(msg.member("result") or b"{}", "result")
        return Answer(t, False, orjson.loads(raw), raw)

    # ---------------------------------------------------------------- failure

    def link_failed(self, link: Link, cause: dict[str, Any]) -> None:
        """`link` is gone: answer every request pending on it with the cause."""
        link.failure = cause
        routes = list(link.pending.values())
        link.pending.clear()
        for t in routes:
            self._fail(t, cause)

    def fail_all(self, cause: dict[str, Any]) -> None:
        """The chain is shutting down: answer everything the editor still waits for."""
        for _key, (target, handle, _side) in list(self.editor.incoming.items()):
            t = target.pending.pop(handle, None) if isinstance(handle, int) else handle
            if t is not None:
                self._fail(t, cause)

    def _fail(self, t: Transit, cause: dict[str, Any]) -> None:
        if t.source.failure is not None:
            t.source.incoming.pop(t.key, None)
            return
        if t.source is self.editor and t.expect_version is not None:
            self.initializing = False
        self._conductor_error(t, INTERNAL_ERROR, cause["message"], cause)


def _legacy_offer(params: bytes | None) -> bytes:
    """Initialize params with `_meta.proxy: true` (the older draft's proxy role offer); every
    other byte of them as it was."""
    if params is None:
        return b'{"_meta":{"proxy":true}}'
    old = wire.parse(params)
    if type(old) is not dict:
        return params
    value = wire.parse(params)
    meta = value.get("_meta")
    value["_meta"] = {**(meta if type(meta) is dict else {}), "proxy": True}
    return wire.encode_preserving(params, old, value)


def _legacy_withdraw(payload: bytes, what: str) -> bytes:
    """The payload without `_meta.proxy` (hop-local in the older draft); every other byte of
    it as it was."""
    old = wire.parse(payload)
    meta = old.get("_meta") if type(old) is dict else None
    if type(meta) is not dict or "proxy" not in meta:
        return payload
    value = wire.parse(payload)
    rest = {k: v for k, v in meta.items() if k != "proxy"}
    if rest:
        value["_meta"] = rest
    else:
        del value["_meta"]
    log.debug("removed the hop-local _meta.proxy from an initialize %s", what)
    return wire.encode_preserving(payload, old, value)


def _mcp_key(params: dict[str, Any]) -> tuple[str, str]:
    """(serverId, requestId) of an mcp/message, hashable whatever the peer sent."""
    return repr(params.get("serverId")), repr(params.get("requestId"))


def _error_code(obj: dict[str, Any]) -> Any:
    error = obj.get("error")
    return error.get("code") if type(error) is dict else None
