"""redact: masks secrets (API keys, tokens) in both directions.

Toward the agent, the text of `session/prompt` content blocks (text blocks and the text of
embedded `resource` blocks) is masked before the agent sees it. Toward the editor, the content
of every `session/update` is masked: message and thought chunks, v2 whole messages
(`agent_message`, `agent_thought`, `user_message`), and the text of tool call content
(`tool_call`, `tool_call_update`, v2 `tool_call_content_chunk`). Works for ACP v1 and v2.

    [[proxy]]
    plugin = "proxies.redact:RedactProxy"
    options = { replacement = "[REDACTED]" }   # and optionally patterns = ['...', ...]

Options:

- `patterns` (list of Python regular expressions): what to mask; each whole match is
  replaced. The default, `DEFAULT_PATTERNS`, covers common API keys and tokens: OpenAI and
  Anthropic style `sk-...`, GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`, AWS
  access key ids `AKIA...`/`ASIA...`, Slack `xox[abprs]-...`, Google `AIza...`,
  `Bearer <token>` and PEM private key blocks. Giving `patterns` replaces the defaults (list
  them again to keep them). An invalid expression, or one that matches the empty string, is
  a factory error reported before anything starts.
- `replacement` (string, default `[REDACTED]`): what each match becomes.

Limits: each message is masked on its own, so a secret that an agent streams split across two
chunks (`"sk-abc"` then `"def..."`) reaches the editor unmasked, as may a prefix long enough to
match on its own. Tool call titles, `rawInput`/`rawOutput`, diffs, terminal output, file
system and permission requests are passed through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from conductor.plugin import Call

DEFAULT_PATTERNS: tuple[str, ...] = (
    r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic (sk-ant-...), sk-proj-...
    r"\bgh[pousr]_[A-Za-z0-9]{36,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",  # GitHub fine-grained tokens
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"\bAIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]{16,}",  # Authorization: Bearer <token>
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)


class RedactProxy:
    def __init__(
        self, patterns: Sequence[str] = DEFAULT_PATTERNS, replacement: str = "[REDACTED]"
    ) -> None:
        if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
            raise TypeError("'patterns' must be a list of regular expressions")
        if not isinstance(replacement, str):
            raise TypeError("'replacement' must be a string")
        self.patterns = [_compile(p) for p in patterns]
        self.replacement = replacement

    def mask(self, text: str) -> str:
        for pattern in self.patterns:
            text = pattern.sub(lambda _: self.replacement, text)
        return text

    async def on_session_prompt(self, call: Call) -> None:
        if isinstance(call.params, dict):
            self._mask_content(call.params.get("prompt"))

    async def on_session_update(self, call: Call) -> None:
        update = call.params.get("update") if isinstance(call.params, dict) else None
        if isinstance(update, dict):
            self._mask_content(update.get("content"))

    def _mask_content(self, content: Any) -> None:
        """Mask, in place, the text of a content block, a tool call content item, or a list."""
        if isinstance(content, list):
            for item in content:
                self._mask_content(item)
        elif isinstance(content, dict):
            kind = content.get("type")
            if kind == "text" and isinstance(content.get("text"), str):
                content["text"] = self.mask(content["text"])
            elif kind == "resource" and isinstance(content.get("resource"), dict):
                resource = content["resource"]
                if isinstance(resource.get("text"), str):
                    resource["text"] = self.mask(resource["text"])
            elif kind == "content":  # tool call content wraps one content block
                self._mask_content(content.get("content"))


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    if compiled.fullmatch(""):
        raise ValueError(f"pattern {pattern!r} matches the empty string")
    return compiled
