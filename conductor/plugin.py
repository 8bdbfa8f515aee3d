"""The proxy plugin API: a proxy is a plain object with async hook methods.

    class Arrow:
        async def on_session_update(self, call: Call) -> None:
            if (text := chunk_text(call.params)) is not None:
                set_chunk_text(call.params, "> " + text)

A hook is named after the ACP method it sees (`session/prompt` ->
`on_session_prompt`, `_vendor/x` -> `on_vendor_x`); `on_message` sees every
request and notification that has no hook of its own. Whatever has no hook
passes through unchanged. Inside a hook, the `Call` can be modified in place,
forwarded and its reply awaited, answered locally, or dropped; `call.ctx`
sends the proxy's own requests and notifications to either side and keeps
per-session state. Methods marked `@tool` are offered to the agent as MCP
tools (see `mcp_tools`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .call import Call, Context, ProxyRequestError, Reply
from .mcp_tools import ToolCall, ToolError, ToolResult, tool
from .plugin_host import hook_name
from .protocol import AGENT, EDITOR, TOWARD_AGENT, TOWARD_EDITOR

__all__ = [
    "AGENT",
    "EDITOR",
    "TOWARD_AGENT",
    "TOWARD_EDITOR",
    "Call",
    "Context",
    "PluginError",
    "ProxyRequestError",
    "Reply",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "hook_name",
    "load_factory",
    "tool",
]

ENTRY_POINT_GROUP = "acp_conductor.proxies"


class PluginError(Exception):
    """A plugin that cannot be loaded or that rejects its options (message is for the user)."""


def load_factory(spec: str, search_path: Path | None = None) -> Callable[..., Any]:
    """Resolve `module:attr` or an entry-point name of the `acp_conductor.proxies` group."""
    if ":" not in spec:
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name == spec:
                try:
                    return entry.load()  # type: ignore[no-any-return]
                except Exception as exc:
                    raise PluginError(
                        f"plugin {spec!r} (entry point {entry.value}) cannot be loaded: {exc}"
                    ) from None
        known = sorted(e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        raise PluginError(
            f"no plugin named {spec!r}; give 'module:factory' or one of the installed names {known}"
        )
    module_name, _, attr = spec.partition(":")
    added = False
    if search_path is not None and str(search_path) not in sys.path:
        sys.path.insert(0, str(search_path))
        added = True
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(
            f"plugin {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        if added:
            sys.path.remove(str(search_path))
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise PluginError(f"plugin {spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(target):
        raise PluginError(f"plugin {spec!r}: {attr!r} is not callable")
    return target  # type: ignore[no-any-return]


def instantiate(spec: str, factory: Callable[..., Any], options: dict[str, Any]) -> Any:
    """Call the factory with the options; a refusal becomes a PluginError."""
    try:
        return factory(**options)
    except Exception as exc:
        raise PluginError(
            f"plugin {spec!r} rejected its options {options!r}: {type(exc).__name__}: {exc}"
        ) from None
