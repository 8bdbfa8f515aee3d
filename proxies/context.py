"""context: adds standing instructions and file contents to a session's first prompt.

The configured text and each file (a text block headed by its path) are put in front of the
first `session/prompt` of every session, or of every prompt with `every_prompt = true`, as
ordinary text content blocks, so any agent sees them as part of the user's message. The same
shape works in ACP v1 and v2 (both carry `params.prompt` content blocks).

    [[proxy]]
    plugin = "proxies.context:ContextProxy"
    options = { text = "Answer briefly.", files = ["CONVENTIONS.md"], base_dir = "/abs/project" }

Options:

- `text` (string): instructions added as the first block.
- `files` (list of paths): each file is read once, at startup, as UTF-8 and added as a block
  starting with `--- PATH ---`. A missing or unreadable file is a factory error, reported
  (by `conductor check` and `conductor run`) before anything starts.
- `every_prompt` (bool, default false): add the context to every prompt, not just the first.
- `base_dir` (path): where relative `files` are looked up; default is the current directory
  of the process running the proxy (the conductor's, for an in-process plugin), not the
  chain file's folder. A relative `base_dir` is itself taken from the current directory.

At least one of `text` and `files` must be given.

Limits: "first prompt" is per session id and per proxy lifetime: a prompt answered with an
error does not count (the next one carries the context again), and a session loaded or resumed
after a restart gets the context again on its next prompt. Files are not re-read while the
chain runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from conductor.acp import text_block
from conductor.plugin import Call

SENT = "context_sent"  # per-session state key


class ContextProxy:
    def __init__(
        self,
        text: str = "",
        files: Sequence[str] = (),
        every_prompt: bool = False,
        base_dir: str | None = None,
    ) -> None:
        if not isinstance(text, str):
            raise TypeError("'text' must be a string")
        if isinstance(files, str) or not all(isinstance(f, str) for f in files):
            raise TypeError("'files' must be a list of paths")
        if not isinstance(every_prompt, bool):
            raise TypeError("'every_prompt' must be true or false")
        if base_dir is not None and not isinstance(base_dir, str):
            raise TypeError("'base_dir' must be a path")
        if not text and not files:
            raise ValueError("nothing to add: give 'text', 'files' or both")
        self.every_prompt = every_prompt
        base = Path(base_dir or ".")
        self.blocks = [text] if text else []
        self.blocks += [f"--- {name} ---\n{_read(base / name)}" for name in files]

    async def on_session_prompt(self, call: Call) -> None:
        if not isinstance(call.params, dict) or not isinstance(call.params.get("prompt"), list):
            return  # malformed: let the agent answer it
        state = call.state
        if state.get(SENT) and not self.every_prompt:
            return
        state[SENT] = True
        call.params["prompt"][:0] = [text_block(block) for block in self.blocks]
        reply = await call.forward()
        if reply is not None and not reply.ok:
            state[SENT] = False  # the agent did not take this prompt: try again next time


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"context file {str(path.absolute())!r} not found") from None
    except UnicodeDecodeError:
        raise ValueError(f"context file {str(path.absolute())!r} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"cannot read context file {str(path.absolute())!r}: {exc}") from None
