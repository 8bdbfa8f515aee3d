"""Validate ACP wire messages against the official JSON schemas (shared/acp-schema).

The schemas are looked up in `$ACP_SCHEMA_DIR`, else `<repo>/../shared/acp-schema` (where CI
puts a copy of shared/), else `/work/shared/acp-schema`, else the copy kept in
`tests/acp-schema`. When none exists, the test asking for them fails: schema checks are never
silently skipped.

Usage, one `Validator` per connection (it remembers the requests of both ends, so responses
can be checked against the response def of their request's method)::

    v = validator(2)
    v.record(request_from_the_editor, CLIENT)      # remembered, not checked
    v.check_message(message_to_the_editor, AGENT)  # checked (and remembered if a request)

`sender` is the role of the sending end on that connection: `CLIENT` for the editor side
(the conductor talking to a proxy or to the agent), `AGENT` for the agent side (the
conductor talking to the editor). How the def is chosen:

* the envelope: `{Client,Agent}{Request,Notification,Response}` after the sender, plus strict
  JSON-RPC 2.0 rules (`jsonrpc`, exactly one of `result`/`error`, no other members);
* params: the `$defs` entry whose `x-method` is the method and whose `x-side` is the side that
  handles it (`agent` for what a client sends, `client` for what an agent sends, `proxy` for
  `proxy/*`, `protocol` for `$/...`), with a name ending in `Request` or `Notification`;
  `_proxy/initialize` and `_proxy/successor` are looked up as `proxy/initialize` and
  `proxy/successor`; extension methods (`_...`) have no def beyond the envelope, any other
  method without a def is a violation;
* a `proxy/successor` envelope is checked against ProxySuccessor{Request,Notification}, then
  the wrapped method and params as a message travelling the other way: what a client-side
  sender wraps comes from the agent side and vice versa;
* results: the `...Response` def of the request's method and side (for `proxy/successor`, the
  wrapped method's); errors: the `Error` def.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import jsonschema  # type: ignore[import-untyped]
import jsonschema.exceptions  # type: ignore[import-untyped]
import pytest

REPO = Path(__file__).resolve().parent.parent
ENV_VAR = "ACP_SCHEMA_DIR"
CLIENT = "client"
AGENT = "agent"
VERSIONS = (1, 2)
PROXY_METHODS = {
    "_proxy/initialize": "proxy/initialize",
    "_proxy/successor": "proxy/successor",
}
SUCCESSOR = "proxy/successor"
MAX_SHOWN = 600  # characters of a message shown in a failure


def schema_candidates() -> list[Path]:
    env = os.environ.get(ENV_VAR)
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "acp-schema", Path("/work/shared/acp-schema")]
    # A copy kept in the repository (with its license) so a fresh clone can run the suite.
    candidates.append(REPO / "tests" / "acp-schema")
    return candidates


@cache
def schema_dir() -> Path:
    """The schema folder; fails the calling test (never skips) when there is none."""
    candidates = schema_candidates()
    for candidate in candidates:
        if all((candidate / f"v{v}" / "schema.unstable.json").is_file() for v in VERSIONS):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    pytest.fail(
        f"ACP JSON schemas not found (looked for v1/ and v2/schema.unstable.json in: {tried}); "
        f"set {ENV_VAR} to the acp-schema folder of shared/",
        pytrace=False,
    )


@cache
def schema_defs(version: int, unstable: bool = True) -> dict[str, Any]:
    name = "schema.unstable.json" if unstable else "schema.json"
    defs: dict[str, Any] = json.loads((schema_dir() / f"v{version}" / name).read_text())["$defs"]
    return defs


@cache
def def_validator(version: int, unstable: bool, name: str) -> jsonschema.Draft202012Validator:
    defs = schema_defs(version, unstable)
    assert name in defs, f"v{version} schema has no $defs/{name}"
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": defs})


def shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def id_key(value: Any) -> str:
    """JSON-RPC ids match by JSON value and type: 1 and "1" are different requests."""
    return json.dumps(value)


def canonical(method: str) -> str:
    return PROXY_METHODS.get(method, method)


def other(sender: str) -> str:
    return AGENT if sender == CLIENT else CLIENT


def handler_side(method: str, sender: str) -> str:
    """The `x-side` of the defs of `method` when `sender` sends it."""
    if method.startswith("proxy/"):
        return "proxy"
    if method.startswith("$/"):
        return "protocol"
    return AGENT if sender == CLIENT else CLIENT


class SchemaViolation(AssertionError):
    pass


class Validator:
    """Schema checks for one connection of one protocol version."""

    def __init__(self, version: int, unstable: bool = True) -> None:
        assert version in VERSIONS, version
        self.version = version
        self.unstable = unstable
        # (sender of the request, id) -> (method, defs its result must match)
        self.pending: dict[tuple[str, str], tuple[str, list[str]]] = {}

    # -- single defs --------------------------------------------------------------------------

    @property
    def defs(self) -> dict[str, Any]:
        return schema_defs(self.version, self.unstable)

    def check(self, name: str, value: Any) -> None:
        """Validate `value` against `$defs/name`; raises jsonschema.ValidationError."""
        def_validator(self.version, self.unstable, name).validate(value)

    def def_name(self, method: str, side: str, suffix: str) -> str | None:
        """The `$defs` entry for `method` handled by `side`; suffix picks Request/Response/..."""
        names = [
            name
            for name, d in self.defs.items()
            if d.get("x-method") == method and d.get("x-side") == side and name.endswith(suffix)
        ]
        assert len(names) <= 1, names
        return names[0] if names else None

    # -- messages -----------------------------------------------------------------------------

    def record(self, message: Any, sender: str) -> None:
        """Remember the requests in `message` (or batch) without checking anything."""
        for item in message if isinstance(message, list) else [message]:
            if isinstance(item, dict) and isinstance(item.get("method"), str) and "id" in item:
                self.remember(item["id"], item["method"], sender, item.get("params"))

    def remember(self, req_id: Any, method: str, sender: str, params: Any = None) -> None:
        """Note that `sender` sent request `req_id` (for the check of its response)."""
        method = canonical(method)
        side = handler_side(method, sender)
        result_defs = [name] if (name := self.def_name(method, side, "Response")) else []
        if (
            method == SUCCESSOR
            and isinstance(params, dict)
            and isinstance(params.get("method"), str)
        ):
            inner = canonical(params["method"])
            inner_side = handler_side(inner, other(sender))
            if inner_name := self.def_name(inner, inner_side, "Response"):
                result_defs.append(inner_name)
        self.pending[(sender, id_key(req_id))] = (method, result_defs)

    def check_message(self, message: Any, sender: str) -> list[str]:
        """Check one message (or batch) that `sender` sent; return the defs it was checked
        against. Raises SchemaViolation naming the message, the def and the error."""
        assert sender in (CLIENT, AGENT), sender
        if isinstance(message, list):
            if not message:
                self.fail(message, "JSON-RPC", "an empty array is not a valid batch")
            used = []
            for item in message:
                used += self.check_message(item, sender)
            return used
        if not isinstance(message, dict):
            self.fail(message, "JSON-RPC", "a message must be an object")
        if message.get("jsonrpc") != "2.0":
            self.fail(message, "JSON-RPC", 'member "jsonrpc" must be exactly "2.0"')
        role = "Client" if sender == CLIENT else "Agent"
        if "method" in message:
            return self._check_call(message, sender, role)
        return self._check_response(message, sender, role)

    def _check_call(self, message: dict[str, Any], sender: str, role: str) -> list[str]:
        extra = set(message) - {"jsonrpc", "id", "method", "params"}
        if extra:
            self.fail(message, "JSON-RPC", f"unexpected members {sorted(extra)}")
        is_request = "id" in message
        kind = "Request" if is_request else "Notification"
        envelope = f"{role}{kind}"
        self._validate(message, envelope, message)
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            self.fail(message, "JSON-RPC", '"params" must be an object or an array')
        used = [envelope, *self._check_params(message, message["method"], params, sender, kind)]
        if is_request:
            self.remember(message["id"], message["method"], sender, params)
        return used

    def _check_params(
        self, message: dict[str, Any], method: Any, params: Any, sender: str, kind: str
    ) -> list[str]:
        """Check `params` of `method` sent by `sender`; recurses into proxy/successor."""
        if not isinstance(method, str):
            self.fail(message, "JSON-RPC", '"method" must be a string')
        method = canonical(method)
        side = handler_side(method, sender)
        name = self.def_name(method, side, kind)
        if name is None:
            if method.startswith("_"):
                return []  # extension method: the envelope is all the schema says
            self.fail(message, f"x-method={method} x-side={side}", f"no {kind} def in the schema")
        self._validate(message, name, params)
        used = [name]
        if method == SUCCESSOR:
            assert isinstance(params, dict)  # the def requires an object
            if params.get("method") == "$/cancel_request":
                self.fail(message, name, "$/cancel_request is hop-local and is never wrapped")
            inner = params.get("params")
            used += self._check_params(message, params["method"], inner, other(sender), kind)
        return used

    def _check_response(self, message: dict[str, Any], sender: str, role: str) -> list[str]:
        extra = set(message) - {"jsonrpc", "id", "result", "error"}
        if extra:
            self.fail(message, "JSON-RPC", f"unexpected members {sorted(extra)}")
        if "id" not in message:
            self.fail(message, "JSON-RPC", 'a response needs an "id" (null if unknown)')
        if ("result" in message) == ("error" in message):
            self.fail(message, "JSON-RPC", 'a response has exactly one of "result" and "error"')
        envelope = f"{role}Response"
        self._validate(message, envelope, message)
        request = self.pending.pop((other(sender), id_key(message["id"])), None)
        if "error" in message:
            self._validate(message, "Error", message["error"])
            return [envelope, "Error"]
        if request is None:
            self.fail(message, envelope, f"a result for id {shown(message['id'])}, never requested")
        _method, result_defs = request
        for name in result_defs:
            self._validate(message, name, message["result"])
        return [envelope, *result_defs]

    def _validate(self, message: Any, name: str, value: Any) -> None:
        errors = list(def_validator(self.version, self.unstable, name).iter_errors(value))
        if errors:
            error = jsonschema.exceptions.best_match(errors)
            path = "".join(f"[{p!r}]" for p in error.absolute_path) or "(top)"
            where = "" if value is message else f" of {shown(value)}"
            self.fail(message, name, f"{error.message} at {path}{where}")

    def fail(self, message: Any, definition: str, problem: str) -> NoReturn:
        raise SchemaViolation(
            f"v{self.version} {definition}: {problem}\n    message: {shown(message)}"
        )


def validator(version: int, unstable: bool = True) -> Validator:
    """A fresh validator for one connection (schema.unstable.json unless unstable=False)."""
    return Validator(version, unstable)
