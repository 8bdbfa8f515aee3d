"""The protocol vocabulary: method names, sides, dialects and error codes, in one place.

The router, the plugin host, `conductor proxy` and the tests all speak of the
same methods and codes; defining them once keeps them from disagreeing.
"""

from __future__ import annotations

__all__ = [
    "AGENT",
    "CANCEL",
    "DIALECTS",
    "EDITOR",
    "INITIALIZE",
    "MCP_MESSAGE",
    "PROXY_INITIALIZE",
    "SESSION_SETUP",
    "SUCCESSOR",
    "SUPPORTED_VERSIONS",
    "TOWARD_AGENT",
    "TOWARD_EDITOR",
    "Dialect",
]

# The two sides of a proxy: where a message comes from, or goes to.
EDITOR = "editor"  # upstream, toward the editor
AGENT = "agent"  # downstream, toward the agent

INITIALIZE = "initialize"
CANCEL = "$/cancel_request"
MCP_MESSAGE = "mcp/message"
SESSION_SETUP = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
SUPPORTED_VERSIONS = (1, 2)

# The proxy methods, in every spelling a conductor may meet. The reference documents use the
# underscore form, the published schema the plain form; an older draft (spoken by
# @thinkwell/conductor) offers the proxy role in `initialize._meta.proxy` and names the
# successor method by message kind.
PROXY_INITIALIZE_UNDERSCORE = "_proxy/initialize"
PROXY_INITIALIZE_PLAIN = "proxy/initialize"
PROXY_INITIALIZE = frozenset({PROXY_INITIALIZE_UNDERSCORE, PROXY_INITIALIZE_PLAIN})
SUCCESSOR_UNDERSCORE = "_proxy/successor"
SUCCESSOR_PLAIN = "proxy/successor"
LEGACY_REQUEST = "_proxy/successor/request"
LEGACY_NOTIFICATION = "_proxy/successor/notification"
SUCCESSOR = frozenset({SUCCESSOR_UNDERSCORE, SUCCESSOR_PLAIN, LEGACY_REQUEST, LEGACY_NOTIFICATION})


class Dialect:
    """How one proxy spells the proxy methods (`dialect = ...` in a chain file)."""

    AUTO = "auto"  # underscore first; plain after a -32601 to _proxy/initialize
    UNDERSCORE = "underscore"
    PLAIN = "plain"
    LEGACY = "legacy"


DIALECTS = (Dialect.AUTO, Dialect.UNDERSCORE, Dialect.PLAIN, Dialect.LEGACY)

# The quoted wire spellings (initialize method, successor method) of each form.
UNDERSCORE_WIRE = (b'"_proxy/initialize"', b'"_proxy/successor"')
PLAIN_WIRE = (b'"proxy/initialize"', b'"proxy/successor"')
LEGACY_WIRE = (b'"_proxy/successor/request"', b'"_proxy/successor/notification"')

# JSON-RPC 2.0 error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800  # ACP's answer to a cancelled request

# The MCP-over-ACP binding's outer error codes.
TOO_MANY_MCP_REQUESTS = -33000
UNKNOWN_MCP_SERVER = -33001
MCP_HANDLER_FAILED = -33002

# Methods that travel from the agent toward the editor; everything else travels the other way
# (methods of unknown direction, such as extensions, are treated as both).
TOWARD_EDITOR = frozenset(
    {
        "session/update",
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/output",
        "terminal/release",
        "terminal/wait_for_exit",
        "terminal/kill",
        "session/elicitation",
        MCP_MESSAGE,
    }
)
TOWARD_AGENT = frozenset(
    {
        INITIALIZE,
        "authenticate",
        "logout",
        "auth/login",
        "auth/logout",
        "session/new",
        "session/load",
        "session/list",
        "session/resume",
        "session/fork",
        "session/close",
        "session/delete",
        "session/prompt",
        "session/cancel",
        "session/set_mode",
        "session/set_model",
        "session/set_config_option",
    }
)


def other_side(side: str) -> str:
    return AGENT if side == EDITOR else EDITOR
