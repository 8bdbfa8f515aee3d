"""Benchmark: pipelined floods through the conductor (does it answer everything, in order,
in bounded memory, and does it go away when its editor does?).

Not a test: run it on demand and read the tables.

    python bench/flood.py [--only a|b|c|d ...] [--prompts 10000] [--slow-prompts 1500]
                          [--baseline DIR] [--stall 5] [--no-direct]

The client is the editor: it writes N pipelined `session/prompt` requests (each with
`--size` characters of text, ~8 KB) from one thread while another thread reads everything
the conductor writes. It reports answers received / N, whether the answers arrived in
request order, the wall time from the first request written to the last answer, messages
received per second, and the conductor's peak RSS (VmHWM in /proc/PID/status, read just
before closing; for the direct rows, the agent's). When nothing arrives for `--stall`
seconds the measurement ends and reports "stalled after K answers"; the peer is then
closed, SIGTERMed and SIGKILLed as needed (the note says which was needed).

Configurations:

  a  N prompts through 1 subprocess pass-through proxy (tests/fixtures/passthrough_proxy.py)
     to the demo agent (`--chunks 1`: one session/update echoing the prompt, then the answer).
  b  `--slow-prompts` prompts through 0 proxies to a correct but slow agent
     (bench/flood_agent.py: `--agent-delay` seconds per input line, one update, the answer).
  c  (a) with the editor killed midway: the editor is a separate process (this script with
     a private option) that launches `conductor run --grace 1 CHAIN`, floods, and is
     SIGKILLed once about half the answers arrived (or once answers stall, if that comes
     first: then the row says so). Reported: how long the conductor, and then the last of
     its children, took to exit after the kill, or "still alive after T s" (`--exit-timeout`).
     Whatever is still alive then is SIGKILLed by pid.
  d  one prompt answered by `--updates` session/updates of `--update-size` characters,
     written as fast as the pipe takes them by bench/flood_agent.py, through a slow in-process
     plugin (bench/plugins.py:Slow, trio.sleep(`--plugin-delay`) on every update). Reported:
     updates received, whether every update arrived in order, the wall time, and peak RSS.
     (The demo agent streams by splitting the echo of the prompt into `--chunks` pieces, so
     big updates would need an equally big prompt, whose own passage would dominate the peak
     RSS; the flood agent's updates are big while its prompt is small.)

Every configuration also runs "direct to the agent" (no conductor) as a harness check, and
(d) runs "conductor, 0 proxies" with the same agent, to show the RSS without the slow plugin;
`--no-direct` skips those rows. `--baseline DIR` adds the same configurations for another
checkout of this repository (an older conductor), run as `python -m conductor` with cwd=DIR
and PYTHONPATH=DIR with the same chain files (the agents, the proxy and the Slow plugin
stay this checkout's: the plugin module is linked into the chain's folder, from where the
conductor imports it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
DEMO_AGENT = [PY, "-m", "conductor.demo_agent", "--chunks", "1"]
FLOOD_AGENT = [PY, str(ROOT / "bench" / "flood_agent.py")]
PROXY = [PY, str(ROOT / "tests" / "fixtures" / "passthrough_proxy.py")]
PLUGIN_MODULE = "bench_flood_plugins"  # bench/plugins.py, linked into the chain folder
WRITE_BATCH = 1 << 16
INDEX_DIGITS = 9  # flood_agent.py's update texts start with their index
FIRST_FLOOD_ID = 10  # ids below are the set-up requests


@dataclass
class Command:
    """A process to launch as the editor's peer."""

    argv: list[str]
    cwd: Path = ROOT
    env: dict[str, str] | None = None  # None: inherit ours


# ----------------------------------------------------------------------- /proc helpers


def proc_status_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of `pid`, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live descendant of `pid`."""
    parents: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                parents.setdefault(stat[1], []).append((int(entry), stat[2]))
    found: list[tuple[int, int]] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def alive(pid: int, start: int) -> bool:
    """Whether that process still runs (a zombie has exited: nobody may reap an orphan)."""
    stat = proc_stat(pid)
    return stat is not None and stat[2] == start and stat[0] not in "ZX"


def kill_all(procs: list[tuple[int, int]]) -> int:
    """SIGKILL those of `procs` that still run (by pid, checking it is still the same one)."""
    killed = 0
    for pid, start in procs:
        if alive(pid, start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def wait_gone(procs: list[tuple[int, int]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(*p) for p in procs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# --------------------------------------------------------------------------- the editor


@dataclass
class Tally:
    """What the editor had received when the measurement ended (closing adds more: the
    conductor answers what it still holds with errors as it shuts down)."""

    messages: int
    answers: int
    errors: int
    out_of_order: int
    updates: int
    update_disorder: int
    late_updates: int
    indexed: int
    wall: float


class Editor:
    """The flooding editor: one thread writes, another reads everything, the caller waits."""

    def __init__(self, cmd: Command, capture_stderr: bool = True, indexed: bool = False) -> None:
        # The peer's stderr goes to a file, shown under the table (None: ours).
        self.log = tempfile.TemporaryFile() if capture_stderr else None  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            cwd=cmd.cwd,
            env=cmd.env,
        )
        assert self.proc.stdin and self.proc.stdout
        self.start = self.proc_start()
        self.w = self.proc.stdin.fileno()
        self.r = self.proc.stdout.fileno()
        self.messages = 0
        self.answers = 0
        self.errors = 0
        self.out_of_order = 0
        self.updates = 0
        self.update_disorder = 0  # indexed updates (flood_agent --updates) out of sequence
        self.late_updates = 0  # updates that arrived after an answer to the flood
        self.indexed: int | None = 0 if indexed else None  # updates that carried their index
        self.last_id = 0
        self.written = 0  # requests of the flood written (whole batches)
        self.flood_count = 0
        self.flood_start = 0.0
        self.last_message = time.monotonic()
        self.last_answer = 0.0
        self.eof = False
        self._replies: dict[int, dict] = {}
        self._waiting: dict[int, threading.Event] = {}
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def proc_start(self) -> int:
        stat = proc_stat(self.proc.pid)
        return stat[2] if stat else 0

    # -- reading

    def _read(self) -> None:
        tail = b""
        while True:
            try:
                chunk = os.read(self.r, 1 << 18)
            except OSError:
                break
            if not chunk:
                break
            self.last_message = time.monotonic()
            *lines, tail = (tail + chunk).split(b"\n") if tail else chunk.split(b"\n")
            for line in lines:
                if line.strip():
                    self._line(line)
        self.eof = True

    def _line(self, line: bytes) -> None:
        self.messages += 1
        if b'"method"' in line:
            if b'"session/update"' in line:
                self._update(line)
            return
        msg = json.loads(line)
        rid = msg.get("id")
        if type(rid) is int and rid < FIRST_FLOOD_ID:
            self._replies[rid] = msg
            event = self._waiting.get(rid)
            if event is not None:
                event.set()
            return
        self.answers += 1
        self.last_answer = time.monotonic()
        if "error" in msg:
            self.errors += 1
        if type(rid) is not int or rid <= self.last_id:
            self.out_of_order += 1
        else:
            self.last_id = rid

    def _update(self, line: bytes) -> None:
        if self.indexed is not None:
            # flood_agent.py --updates: each text starts with its index (the fast path reads
            # the agent's compact JSON as forwarded; anything else is parsed).
            at = line.find(b'"text":"')
            index = line[at + 8 : at + 8 + INDEX_DIGITS] if at >= 0 else b""
            if not index.isdigit():
                try:
                    text = json.loads(line)["params"]["update"]["content"]["text"]
                    index = text[:INDEX_DIGITS].encode()
                except (ValueError, KeyError, TypeError, AttributeError):
                    index = b""
            if index.isdigit():
                self.indexed += 1
                if int(index) != self.updates:
                    self.update_disorder += 1
        if self.answers:
            self.late_updates += 1
        self.updates += 1

    # -- writing

    def _write_all(self, data: bytes) -> bool:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.w, view) :]
        except OSError:
            return False
        return True

    def call(self, method: str, params: object, timeout: float = 30.0) -> dict:
        """A set-up request, answered before the flood starts."""
        self._next_id += 1
        rid = self._next_id
        assert rid < FIRST_FLOOD_ID
        self._waiting[rid] = event = threading.Event()
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        self._write_all(line.encode() + b"\n")
        if not event.wait(timeout):
            raise RuntimeError(f"no answer to {method} within {timeout} s")
        return self._replies.pop(rid)

    def open_session(self) -> str:
        self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        reply = self.call("session/new", {"cwd": str(ROOT), "mcpServers": []})
        return reply["result"]["sessionId"]

    def flood(self, session: str, count: int, text: str) -> None:
        """Start writing `count` pipelined prompts from a thread of its own."""
        params = json.dumps({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
        head = b'{"jsonrpc":"2.0","id":'
        tail = b',"method":"session/prompt","params":' + params.encode() + b"}\n"

        def write() -> None:
            batch: list[bytes] = []
            size = 0
            for rid in range(FIRST_FLOOD_ID, FIRST_FLOOD_ID + count):
                batch.append(head + str(rid).encode() + tail)
                size += len(batch[-1])
                if size >= WRITE_BATCH or rid == FIRST_FLOOD_ID + count - 1:
                    if not self._write_all(b"".join(batch)):
                        return
                    self.written += len(batch)
                    batch, size = [], 0

        self.flood_count = count
        self.flood_start = time.monotonic()
        self.last_message = self.flood_start
        threading.Thread(target=write, daemon=True).start()

    # -- waiting and closing

    def wait(self, answers: int, stall: float, updates: int = 0) -> str | None:
        """None once `answers` answers (and `updates` updates) arrived, else why not."""
        while True:
            if self.answers >= answers:
                if self.updates >= updates:
                    return None
                if time.monotonic() - self.last_message > 1.0:
                    return f"answered after {self.updates} updates"
            if self.eof:
                time.sleep(0.2)  # let the exit status land
                code = self.proc.poll()
                return f"peer closed its output (exit {code}) after {self.answers} answers"
            if time.monotonic() - self.last_message > stall:
                return (
                    f"stalled after {self.answers} answers "
                    f"({self.written} of {self.flood_count} requests written)"
                )
            time.sleep(0.01)

    def tally(self) -> Tally:
        end = self.last_answer if self.answers else self.last_message
        return Tally(
            self.messages,
            self.answers,
            self.errors,
            self.out_of_order,
            self.updates,
            self.update_disorder,
            self.late_updates,
            self.indexed or 0,
            max(end - self.flood_start, 1e-9),
        )

    def stderr_tail(self, lines: int = 3, width: int = 160) -> list[str]:
        """The last lines the peer (and its children) wrote to stderr."""
        if self.log is None:
            return []
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip()
        self.log.close()
        return [line[:width] for line in text.splitlines()[-lines:]]

    def peak_rss_mb(self) -> float | None:
        kb = proc_status_kb(self.proc.pid, "VmHWM")
        return None if kb is None else kb / 1024

    def close(self, patience: float = 5.0) -> str:
        """Close its input and wait; escalate to SIGTERM, then SIGKILL. Say what it took."""
        family = [(self.proc.pid, self.start), *descendants(self.proc.pid)]
        assert self.proc.stdin
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        note = ""
        try:
            self.proc.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            note = "needed SIGTERM"
            self.proc.terminate()
            try:
                self.proc.wait(timeout=patience)
            except subprocess.TimeoutExpired:
                note = "needed SIGKILL"
                self.proc.kill()
                self.proc.wait()
        if not wait_gone(family[1:], patience):
            count = kill_all(family[1:])
            note += f"{'; ' if note else ''}{count} children SIGKILLed"
        return note


# ---------------------------------------------------------------------- configurations


@dataclass
class Row:
    name: str
    cells: list[str]
    stderr: list[str] = field(default_factory=list)  # the tail of the peer's stderr
    rss: float | None = None  # peak RSS, MB


def mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def prompt_text(size: int) -> str:
    return ("flood of pipelined prompts " * (size // 27 + 1))[:size]


def pipelined(name: str, cmd: Command, count: int, size: int, stall: float) -> Row:
    """(a), (b): `count` pipelined prompts; answers, order, wall, messages/s, peak RSS."""
    editor = Editor(cmd)
    try:
        session = editor.open_session()
    except RuntimeError as exc:
        editor.close()
        return Row(name, [f"set-up failed: {exc}"] + ["-"] * 6, editor.stderr_tail())
    editor.flood(session, count, prompt_text(size))
    outcome = editor.wait(count, stall)
    got = editor.tally()
    rss = editor.peak_rss_mb()
    note = editor.close()
    result = outcome or "complete"
    if note:
        result += f" ({note})"
    in_order = "yes" if got.answers and not got.out_of_order else "no"
    return Row(
        name,
        [
            f"{got.answers} / {count}",
            str(got.errors),
            in_order + (f" ({got.out_of_order} overtaken)" if got.out_of_order else ""),
            f"{got.wall:.2f} s",
            f"{got.messages / got.wall:,.0f}",
            mb(rss),
            result,
        ],
        editor.stderr_tail(),
        rss,
    )


def streamed(name: str, cmd: Command, updates: int, stall: float) -> Row:
    """(d): one prompt answered by `updates` indexed updates; count, order, wall, peak RSS."""
    editor = Editor(cmd, indexed=True)
    try:
        session = editor.open_session()
    except RuntimeError as exc:
        editor.close()
        return Row(name, [f"set-up failed: {exc}"] + ["-"] * 5, editor.stderr_tail())
    editor.flood(session, 1, "stream")
    outcome = editor.wait(1, stall, updates)
    got = editor.tally()
    rss = editor.peak_rss_mb()
    note = editor.close()
    result = outcome or "complete"
    if outcome and outcome.startswith("stalled"):
        result = f"stalled after {got.updates} updates and {got.answers} answers"
    if note:
        result += f" ({note})"
    ok = got.updates == updates == got.indexed and got.answers == 1
    ok = ok and not got.update_disorder and not got.late_updates
    return Row(
        name,
        [
            f"{got.updates} / {updates}",
            "yes"
            if ok
            else f"no ({got.update_disorder} out of sequence, {got.late_updates} after the "
            f"answer, {got.updates - got.indexed} without their index)",
            f"{got.wall:.2f} s",
            f"{got.updates / got.wall:,.0f}",
            mb(rss),
            result,
        ],
        editor.stderr_tail(),
        rss,
    )


def editor_child(spec: dict) -> None:
    """(c), the editor process: launch the conductor, report its pid, flood, report progress
    until it is killed. The parent reads `pid N`, `ready`, then `answers K` lines."""
    env = {**os.environ, **spec["env"]} if spec["env"] is not None else None
    editor = Editor(Command(spec["argv"], Path(spec["cwd"]), env), capture_stderr=False)
    print(f"pid {editor.proc.pid} {editor.start}", flush=True)
    session = editor.open_session()
    print("ready", flush=True)
    editor.flood(session, spec["count"], prompt_text(spec["size"]))
    while True:
        print(f"answers {editor.answers}", flush=True)
        time.sleep(0.005)


def killed_midway(name: str, spec: dict, stall: float, exit_timeout: float) -> Row:
    """(c): SIGKILL the editor after about half the answers; time the conductor's exit."""
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(
            [PY, str(Path(__file__).resolve()), "--editor-child", json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
        )
        assert child.stdout is not None
        fd = child.stdout.fileno()
        buffer = b""
        conductor: tuple[int, int] | None = None
        answers, changed, ready = 0, time.monotonic(), False
        why = ""
        while not why:
            readable, _, _ = select.select([fd], [], [], 0.1)
            if readable:
                data = os.read(fd, 1 << 16)
                if not data:
                    why = "the editor died by itself"
                    break
                *lines, buffer = (buffer + data).split(b"\n")
                for line in lines:
                    word, _, rest = line.decode().partition(" ")
                    if word == "pid":
                        pid, start = rest.split()
                        conductor = (int(pid), int(start))
                    elif word == "ready":
                        ready, changed = True, time.monotonic()
                    elif word == "answers" and int(rest) != answers:
                        answers, changed = int(rest), time.monotonic()
            if answers >= spec["count"] // 2:
                why = "half"
            elif time.monotonic() - changed > (stall if ready else 30):
                why = "stalled" if ready else "no session"
        family = [conductor, *descendants(conductor[0])] if conductor else []
        child.kill()
        child.wait()
        killed = time.monotonic()
        exits: dict[tuple[int, int], float] = {}
        while len(exits) < len(family) and time.monotonic() - killed < exit_timeout:
            for proc in family:
                if proc not in exits and not alive(*proc):
                    exits[proc] = time.monotonic() - killed
            time.sleep(0.01)
        leftovers = kill_all(family)
        log.seek(0)
        tail = [line[:160] for line in log.read().decode(errors="replace").splitlines()[-3:]]
        if why not in ("half", "stalled"):
            return Row(name, [why, "-", "-", "-"], tail)
    when = f"{answers} / {spec['count']}" + (" (stalled: killed then)" if why == "stalled" else "")
    children = family[1:]

    def exited(procs: list[tuple[int, int]]) -> str:
        if not procs:
            return "-"
        if all(p in exits for p in procs):
            return f"{max(exits[p] for p in procs):.2f} s"
        alive_now = sum(p not in exits for p in procs)
        return f"still alive after {exit_timeout:.0f} s ({alive_now} of {len(procs)})"

    return Row(
        name,
        [
            when,
            exited(family[:1]),
            exited(children) + (f" [{len(children)} children]" if children else ""),
            f"{leftovers} SIGKILLed by the bench" if leftovers else "none",
        ],
        tail,
    )


def print_table(title: str, headers: list[str], rows: list[Row]) -> None:
    print(f"\n{title}\n")
    print("| configuration | " + " | ".join(headers) + " |")
    print("| --- |" + " --- |" * len(headers))
    for row in rows:
        print(f"| {row.name} | " + " | ".join(row.cells) + " |")
    for row in rows:
        if row.stderr:
            print(f"\n{row.name}, the end of its stderr:")
            for line in row.stderr:
                print(f"    {line}")


def write_chain(
    folder: Path,
    name: str,
    agent: list[str],
    proxies: int = 0,
    plugin: str | None = None,
    options: str | None = None,
) -> Path:
    """A chain file; the agent runs in this checkout whichever conductor runs the chain."""
    text = f"[[proxy]]\ncommand = {json.dumps(PROXY)}\n" * proxies
    if plugin is not None:
        text += f"[[proxy]]\nplugin = {json.dumps(plugin)}\n"
        if options is not None:
            text += f"options = {options}\n"
    text += f"[agent]\ncommand = {json.dumps(agent)}\ncwd = {json.dumps(str(ROOT))}\n"
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        action="append",
        choices="abcd",
        help="run only these configurations (repeatable; default all)",
    )
    parser.add_argument("--prompts", type=int, default=10000, help="prompts in (a) and (c)")
    parser.add_argument("--slow-prompts", type=int, default=1500, help="prompts in (b)")
    parser.add_argument("--size", type=int, default=8192, help="characters of text per prompt")
    parser.add_argument("--agent-delay", type=float, default=0.003, help="(b): s per line")
    parser.add_argument("--updates", type=int, default=2000, help="updates in (d)")
    parser.add_argument("--update-size", type=int, default=16384, help="characters per update")
    parser.add_argument("--plugin-delay", type=float, default=0.01, help="(d): s per update")
    parser.add_argument(
        "--stall", type=float, default=5.0, help="seconds without a message that end a flood"
    )
    parser.add_argument(
        "--exit-timeout", type=float, default=10.0, help="(c): how long to watch for the exit"
    )
    parser.add_argument("--no-direct", action="store_true", help="skip the harness-check rows")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another checkout of this repository: its conductor gets rows of its own",
    )
    parser.add_argument("--editor-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.editor_child:
        editor_child(json.loads(args.editor_child))
        return
    only = set(args.only or "abcd")

    conductors: list[tuple[str, Path, dict[str, str] | None]] = [("conductor", ROOT, None)]
    if args.baseline is not None:
        base = args.baseline.resolve()
        if not (base / "conductor" / "__init__.py").is_file():
            sys.exit(f"--baseline {base}: not a checkout of this repository (no conductor/)")
        conductors.append(("baseline", base, {"PYTHONPATH": str(base)}))

    def command(cwd: Path, env: dict[str, str] | None, chain: Path, *options: str) -> Command:
        argv = [PY, "-m", "conductor", "run", *options, str(chain)]
        return Command(argv, cwd, {**os.environ, **env} if env is not None else None)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / f"{PLUGIN_MODULE}.py").symlink_to(ROOT / "bench" / "plugins.py")
        proxied = write_chain(folder, "proxied", DEMO_AGENT, proxies=1)
        slow_agent = [*FLOOD_AGENT, "--delay", str(args.agent_delay)]
        slow = write_chain(folder, "slow", slow_agent)
        streamer = [*FLOOD_AGENT, "--delay", "0", "--updates", str(args.updates)]
        streamer += ["--update-size", str(args.update_size)]
        plain_stream = write_chain(folder, "plain-stream", streamer)
        slow_plugin = write_chain(
            folder,
            "slow-plugin",
            streamer,
            plugin=f"{PLUGIN_MODULE}:Slow",
            options=f"{{ delay = {args.plugin_delay!r} }}",
        )
        print(
            f"prompts of {args.size:,} characters; a stall is {args.stall:g} s without a "
            "message; peak RSS is the conductor's VmHWM (the agent's for direct rows)"
        )
        if args.baseline is not None:
            print(f"baseline: {conductors[1][1]} (python -m conductor, cwd and PYTHONPATH there)")

        flood_headers = [
            "answers",
            "errors",
            "in order",
            "wall",
            "messages/s",
            "peak RSS",
            "result",
        ]

        def floods(title: str, agent: list[str], chain: Path, what: str, count: int) -> None:
            """A table of one pipelined flood: direct to `agent`, then through each conductor."""
            rows = []
            if not args.no_direct:
                rows.append(
                    pipelined(f"direct to {what}", Command(agent), count, args.size, args.stall)
                )
            for who, cwd, env in conductors:
                name = f"{who}, {'1 proxy' if chain == proxied else '0 proxies'}, {what[4:]}"
                rows.append(pipelined(name, command(cwd, env, chain), count, args.size, args.stall))
            print_table(title, flood_headers, rows)

        if "a" in only:
            floods(
                f"(a) {args.prompts:,} pipelined prompts through 1 subprocess pass-through proxy",
                DEMO_AGENT,
                proxied,
                "the demo agent",
                args.prompts,
            )
        if "b" in only:
            floods(
                f"(b) {args.slow_prompts:,} pipelined prompts to an agent taking "
                f"{args.agent_delay * 1000:g} ms per input line (floor: "
                f"{args.slow_prompts * args.agent_delay:.1f} s)",
                slow_agent,
                slow,
                "the slow agent",
                args.slow_prompts,
            )
        if "c" in only:
            rows = []
            for who, cwd, env in conductors:
                spec = {
                    "argv": command(cwd, None, proxied, "--grace", "1").argv,
                    "cwd": str(cwd),
                    "env": env,
                    "count": args.prompts,
                    "size": args.size,
                }
                rows.append(killed_midway(f"{who}, 1 proxy", spec, args.stall, args.exit_timeout))
            print_table(
                f"(c) (a) with the editor SIGKILLed after about half of {args.prompts:,} "
                "answers; `conductor run --grace 1`",
                [
                    "answers when the editor was killed",
                    "conductor exited",
                    "children exited",
                    "left over",
                ],
                rows,
            )
        if "d" in only:
            rows = []
            if not args.no_direct:
                rows.append(
                    streamed("direct to the agent", Command(streamer), args.updates, args.stall)
                )
                rows.append(
                    streamed(
                        "conductor, 0 proxies (no slow plugin)",
                        command(ROOT, None, plain_stream),
                        args.updates,
                        args.stall,
                    )
                )
            for who, cwd, env in conductors:
                rows.append(
                    streamed(
                        f"{who}, slow plugin",
                        command(cwd, env, slow_plugin),
                        args.updates,
                        args.stall,
                    )
                )
            print_table(
                f"(d) one reply of {args.updates:,} updates x {args.update_size:,} characters, "
                f"through an in-process plugin taking {args.plugin_delay * 1000:g} ms per update "
                f"(floor: {args.updates * args.plugin_delay:.1f} s)",
                ["updates", "every update, in order", "wall", "updates/s", "peak RSS", "result"],
                rows,
            )
            print()
            control = next((r.rss for r in rows if r.name.startswith("conductor, 0 proxies")), None)
            streamed_mb = args.updates * args.update_size / 2**20
            for row in rows:
                if row.name.endswith("slow plugin") and row.rss is not None and control:
                    print(
                        f"{row.name}: peak RSS {row.rss - control:+.0f} MB over the 0-proxy "
                        f"control, for {streamed_mb:.0f} MB of updates streamed"
                    )


if __name__ == "__main__":
    main()
