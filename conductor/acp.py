"""Small helpers for the ACP shapes proxies touch most, in v1 and draft v2.

They work on the raw params dicts, so a proxy can always fall back to the
dict itself for anything these do not cover.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "chunk_text",
    "permission_options",
    "permission_title",
    "prompt_text",
    "selected",
    "set_chunk_text",
    "text_block",
]


def text_block(text: str) -> dict[str, Any]:
    """A text content block (same shape in v1 and v2)."""
    return {"type": "text", "text": text}


def prompt_text(params: dict[str, Any]) -> str:
    """The text of a `session/prompt`'s text blocks, joined with newlines."""
    blocks = params.get("prompt") or []
    return "\n".join(
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def add_prompt_text(params: dict[str, Any], text: str, *, at_start: bool = True) -> None:
    """Add a text block to a `session/prompt` (first by default, so it reads as context)."""
    blocks = params.setdefault("prompt", [])
    blocks.insert(0 if at_start else len(blocks), text_block(text))


def map_prompt_text(params: dict[str, Any], change: Any) -> None:
    """Replace the text of every text block of a `session/prompt` with `change(text)`."""
    for block in params.get("prompt") or []:
        if (
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ):
            block["text"] = change(block["text"])


def update_kind(params: dict[str, Any]) -> str | None:
    """The `sessionUpdate` variant of a `session/update` notification's params."""
    update = params.get("update")
    return update.get("sessionUpdate") if isinstance(update, dict) else None


def chunk_text(params: dict[str, Any], kind: str = "agent_message_chunk") -> str | None:
    """The text of a `session/update` chunk of `kind` (v1 and v2), or None."""
    update = params.get("update")
    if not isinstance(update, dict) or update.get("sessionUpdate") != kind:
        return None
    content = update.get("content")
    if (
        isinstance(content, dict)
        and content.get("type") == "text"
        and isinstance(content.get("text"), str)
    ):
        return str(content["text"])
    return None


def set_chunk_text(params: dict[str, Any], text: str) -> None:
    """Replace the text of a `session/update` text chunk."""
    params["update"]["content"]["text"] = text


def permission_options(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The options of a `session/request_permission` request."""
    options = params.get("options")
    return [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []


def permission_title(params: dict[str, Any]) -> str:
    """What a permission request is about: v2 `title`, else the v1 tool call's title."""
    if isinstance(params.get("title"), str):
        return str(params["title"])
    tool_call = params.get("toolCall")
    if isinstance(tool_call, dict) and isinstance(tool_call.get("title"), str):
        return str(tool_call["title"])
    subject = params.get("subject")
    if isinstance(subject, dict) and isinstance(subject.get("toolCall"), dict):
        return str(subject["toolCall"].get("title", ""))
    return ""


def permission_kind(params: dict[str, Any]) -> str:
    """The tool kind of a permission request (v1 `toolCall.kind`, v2 subject tool call)."""
    for holder in (params.get("toolCall"), (params.get("subject") or {}).get("toolCall")):
        if isinstance(holder, dict) and isinstance(holder.get("kind"), str):
            return str(holder["kind"])
    return ""


def selected(params: dict[str, Any], wanted: str) -> dict[str, Any]:
    """A permission result choosing the first option whose kind starts with `wanted`
    ("allow" or "reject"); cancelled when there is none."""
    for option in permission_options(params):
        if str(option.get("kind", "")).startswith(wanted):
            return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
    return {"outcome": {"outcome": "cancelled"}}
