"""permissions: answers `session/request_permission` by rules, asking the editor only when told.

Each permission request is matched against the rules in order; the first rule that matches
decides, and `default` decides when none does:

- `allow`: answered here, choosing the request's `allow_once` option (else `allow_always`);
- `reject`: answered here, choosing `reject_once` (else `reject_always`);
- `ask`: forwarded to the editor, which asks the user as usual.

Answered requests never reach the editor. ACP v1 and draft v2 are both understood.

    [[proxy]]
    plugin = "proxies.permissions:PermissionsProxy"     # or the installed name "permissions"
    options = { default = "ask", log_file = "permissions.jsonl", rules = [
        { kind = "read", decision = "allow" },
        { kind = "execute", title = "git *", decision = "allow" },
        { kind = "delete", decision = "reject" },
    ] }

Standalone: `conductor proxy proxies.permissions:PermissionsProxy -o 'rules=[{"kind": "read",
"decision": "allow"}]' -o default=ask -o log_file=permissions.jsonl`.

Options:

- `rules` (list of tables): each has a required `decision` ("allow", "reject" or "ask") and
  optional conditions, all of which must hold for the rule to match (a rule without
  conditions matches everything):
  - `kind`: the tool kind (read, edit, delete, move, search, execute, think, fetch,
    switch_mode, other, or a custom kind starting with `_`), from the v1 `toolCall.kind` or
    the v2 `subject.toolCall.kind`;
  - `title`: a case-sensitive glob (`fnmatch`: `*`, `?`, `[...]`) matched against the
    permission title (v2 `title`, v1 the tool call's title) or, in v2, the title of the tool
    call it is about.
- `default` ("ask", "allow" or "reject"; default "ask"): the decision when no rule matches.
- `log_file` (path): also append each decision to this file as a JSON Lines record
  `{"ts", "sessionId", "title", "kind", "rule", "decision", "optionId"}`, where `rule` is the
  matching rule's number (from 1) or null when the default applied. Relative paths are taken
  from the current directory of the process running the proxy.

Every decision is also logged at INFO to the logger `conductor.proxies.permissions` (shown by
`conductor --log-level info`). Bad rules (unknown key or decision, missing decision, wrong
type) are a factory error, reported by `conductor check` and `conductor run` before anything
starts.

Limits: the tool kind is read from the request itself; a request whose tool call carries no
`kind` (it was given in an earlier `tool_call` update) matches only rules without `kind`.
If an `allow` decision finds no allow option the request is forwarded to the editor (logged
as "ask"); a `reject` decision that finds no reject option answers "cancelled", which never
lets the tool run.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import logging
import os
from typing import Any

from conductor.acp import permission_kind, permission_options, permission_title
from conductor.plugin import Call

log = logging.getLogger("conductor.proxies.permissions")

DECISIONS = ("allow", "reject", "ask")
RULE_KEYS = ("kind", "title", "decision")
TOOL_KINDS = (
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
)
# The option kinds each decision chooses, in order of preference.
OPTION_KINDS = {"allow": ("allow_once", "allow_always"), "reject": ("reject_once", "reject_always")}


def check_rule(number: int, rule: Any) -> dict[str, str]:
    """Validate one rule table; the error names the rule (numbered from 1) and what is wrong."""
    where = f"rules[{number}]"
    if not isinstance(rule, dict):
        raise TypeError(f"{where} must be a table like {{ kind = 'read', decision = 'allow' }}")
    unknown = sorted(set(rule) - set(RULE_KEYS))
    if unknown:
        raise ValueError(f"{where} has unknown key(s) {unknown}; a rule takes {list(RULE_KEYS)}")
    if "decision" not in rule:
        raise ValueError(f"{where} has no 'decision'; give one of {list(DECISIONS)}")
    if rule["decision"] not in DECISIONS:
        raise ValueError(f"{where}: decision {rule['decision']!r} is not one of {list(DECISIONS)}")
    for key in ("kind", "title"):
        if key in rule and not isinstance(rule[key], str):
            raise TypeError(f"{where}: {key!r} must be a string")
    kind = rule.get("kind")
    if kind is not None and kind not in TOOL_KINDS and not kind.startswith("_"):
        raise ValueError(
            f"{where}: kind {kind!r} is not a tool kind; use one of {list(TOOL_KINDS)}"
            " or a custom kind starting with '_'"
        )
    return dict(rule)


def tool_call_title(params: dict[str, Any]) -> str | None:
    """The title of the v2 tool call a permission request is about, if any."""
    subject = params.get("subject")
    tool_call = subject.get("toolCall") if isinstance(subject, dict) else None
    title = tool_call.get("title") if isinstance(tool_call, dict) else None
    return title if isinstance(title, str) else None


def choose(params: dict[str, Any], decision: str) -> str | None:
    """The id of the option that carries out `decision`, or None if the request offers none."""
    options = permission_options(params)
    for kind in OPTION_KINDS[decision]:
        for option in options:
            if option.get("kind") == kind and isinstance(option.get("optionId"), str):
                return str(option["optionId"])
    return None


class PermissionsProxy:
    def __init__(
        self,
        rules: list[dict[str, Any]] | None = None,
        default: str = "ask",
        log_file: str | None = None,
    ) -> None:
        if rules is None:
            rules = []
        if not isinstance(rules, list):
            raise TypeError("'rules' must be a list of tables")
        if default not in DECISIONS:
            raise ValueError(f"'default' {default!r} is not one of {list(DECISIONS)}")
        if log_file is not None and not isinstance(log_file, str):
            raise TypeError("'log_file' must be a path")
        if log_file is not None:
            log_file = os.path.expanduser(log_file)
            if not os.path.isdir(os.path.dirname(log_file) or "."):
                raise ValueError(f"'log_file' {log_file!r}: its folder does not exist")
        self.rules = [check_rule(number, rule) for number, rule in enumerate(rules, 1)]
        self.default = default
        self.log_file = log_file

    def decide(self, params: dict[str, Any]) -> tuple[int | None, str]:
        """The number of the first matching rule (None: the default) and its decision."""
        titles = [permission_title(params), tool_call_title(params)]
        kind = permission_kind(params)
        for number, rule in enumerate(self.rules, 1):
            if "kind" in rule and rule["kind"] != kind:
                continue
            pattern = rule.get("title")
            if pattern is not None and not any(
                t is not None and fnmatch.fnmatchcase(t, pattern) for t in titles
            ):
                continue
            return number, rule["decision"]
        return None, self.default

    async def on_session_request_permission(self, call: Call) -> None:
        params = call.params if isinstance(call.params, dict) else {}
        number, decision = self.decide(params)
        option_id = None
        if decision != "ask":
            option_id = choose(params, decision)
            if option_id is not None:
                call.respond({"outcome": {"outcome": "selected", "optionId": option_id}})
            elif decision == "reject":
                call.respond({"outcome": {"outcome": "cancelled"}})
            else:
                decision = "ask"  # nothing to allow with: the user decides
        self.record(call.session_id, params, number, decision, option_id)
        # "ask": returning without answering forwards the request to the editor.

    def record(
        self,
        session_id: str | None,
        params: dict[str, Any],
        number: int | None,
        decision: str,
        option_id: str | None,
    ) -> None:
        title, kind = permission_title(params), permission_kind(params) or None
        log.info(
            "permission %r (kind %s) in session %s: %s (%s)",
            title,
            kind,
            session_id,
            decision,
            f"rule {number}" if number is not None else "default",
        )
        if self.log_file is None:
            return
        entry = {
            "ts": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "sessionId": session_id,
            "title": title,
            "kind": kind,
            "rule": number,
            "decision": decision,
            "optionId": option_id,
        }
        try:
            with open(self.log_file, "a", encoding="utf-8") as file:
                file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        except OSError as exc:  # the decision stands; only its record is lost
            log.error("cannot append to the permissions log %r: %s", self.log_file, exc)
