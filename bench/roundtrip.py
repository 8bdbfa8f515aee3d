"""Benchmark: prompt round trips and update streaming, direct vs through the conductor.

Not a test: run it on demand and read the table. Every configuration is measured
side by side in alternating rounds, and reported as a ratio to talking to the
demo agent directly in the same run (these machines are shared and noisy).

    python bench/roundtrip.py [--prompts 2000] [--rounds 5] [--updates 20000]
                              [--baseline DIR] [--only PATTERN ...] [--soak 10000]

Besides wall time, every conductor row reports the conductor's own CPU per round trip
(and per streamed update): the sum of the first field of /proc/PID/task/*/schedstat
(ns on CPU) over every thread of the conductor process, not its children, read right
before and right after the timed loop. It is far steadier than wall time on a shared
machine. For @thinkwell/conductor rows it is the node process's own CPU, the same way
(node's JIT needs about 1000 prompts to warm up: with a few hundred, thinkwell's CPU per
hop looks about 3x what it is, and every ratio to it flatters this conductor);
for the served row the `conductor serve` process; for the `url =` row the local
conductor only. The direct rows show no CPU (there is no conductor).

The WebSocket row runs `conductor serve` on a loopback port and drives it with the
`websockets` package's blocking client (a test extra), one connection per measurement.

With node and `npm ci --prefix bench`, @thinkwell/conductor (a competing TypeScript
conductor) is measured in the same run with the same agent and proxies.

`--baseline DIR` adds rows for another checkout of this repository (an older conductor):
it runs as `python -m conductor` with cwd=DIR and PYTHONPATH=DIR, so DIR's package is
imported rather than the installed one, with the same chain files (0, 1 and 3 subprocess
proxies, 3 in-process `arrow` plugins). The agent and the pass-through proxy are this
checkout's in every row; the `arrow` plugin is DIR's (it ships with the conductor).

`--only PATTERN` (repeatable) keeps the rows whose name contains PATTERN, or matches it as
a glob (`--only 'conductor, 3*' --only baseline`); `direct` is always measured. Summary
figures whose rows were left out print as "-".

The last lines compare figures against the targets table of the performance spec
(performance.md).
Before each timed loop one prompt checks the reply: the update text must be exactly what
the agent wrote (with one "> " per `arrow` plugin), so a row that drops or skips hooks
shows up as a warning rather than as a fast number.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
AGENT = [PY, "-m", "conductor.demo_agent", "--chunks", "1"]
PROXY = [PY, str(ROOT / "tests" / "fixtures" / "passthrough_proxy.py")]
ARROW = "proxies.arrow:ArrowProxy"  # modifies the first chunk of each reply; hooks every update
ARROW_PREFIX = "> "
MISSING = "-"


@dataclass
class Command:
    """A process to launch as the editor's peer."""

    argv: list[str]
    cwd: Path = ROOT
    env: dict[str, str] | None = None  # None: inherit ours
    prefix: str = ""  # what the chain's plugins put before the first chunk of each reply


def cpu_ns(pid: int) -> int:
    """Nanoseconds on CPU of every live thread of process `pid` (not its children)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread ended meanwhile
    return total


def update_text(line: bytes | str | None) -> str | None:
    """The text of a session/update chunk line, or None."""
    if line is None:
        return None
    try:
        update = json.loads(line)["params"]["update"]
        return update["content"]["text"]
    except (ValueError, KeyError, TypeError):
        return None


class Pipe:
    """A minimal blocking JSON-lines client: the cheapest possible editor."""

    def __init__(self, cmd: Command) -> None:
        self.proc = subprocess.Popen(
            cmd.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            cwd=cmd.cwd,
            env=cmd.env,
        )
        assert self.proc.stdin and self.proc.stdout
        self.pid = self.proc.pid  # whose CPU counts
        self.w = self.proc.stdin.fileno()
        self.r = self.proc.stdout.fileno()
        self.lines: list[bytes] = []
        self.tail = b""
        self.next_id = 0
        self.first_other: bytes | None = None  # the first other message of the last call

    def send(self, method: str, params: object) -> int:
        self.next_id += 1
        line = json.dumps(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        )
        os.write(self.w, line.encode() + b"\n")
        return self.next_id

    def until_response(self, request_id: int) -> tuple[dict, int]:
        """Read until the response to `request_id`; return it and the number of other messages."""
        marker = b'"id":%d,' % request_id
        others = 0
        while True:
            while not self.lines:
                chunk = os.read(self.r, 1 << 18)
                if not chunk:
                    raise RuntimeError("peer closed its output")
                *complete, self.tail = (self.tail + chunk).split(b"\n")
                complete.reverse()
                self.lines = complete
            line = self.lines.pop()
            if marker in line and b'"method"' not in line:
                return json.loads(line), others
            if not others:
                self.first_other = line
            others += 1

    def call(self, method: str, params: object) -> tuple[dict, int]:
        return self.until_response(self.send(method, params))

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class WsPipe:
    """The same minimal client over a WebSocket to `conductor serve` (the `websockets` package,
    its blocking client): one JSON-RPC message per text frame."""

    def __init__(self, url: str, token: str, pid: int) -> None:
        from websockets.sync.client import connect

        self.ws = connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            max_size=None,
            proxy=None,
            compression=None,
            legacy=True,
        )
        self.pid = pid
        self.next_id = 0
        self.first_other: str | None = None

    def send(self, method: str, params: object) -> int:
        self.next_id += 1
        self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        )
        return self.next_id

    def until_response(self, request_id: int) -> tuple[dict, int]:
        marker = f'"id":{request_id},'
        others = 0
        while True:
            frame = self.ws.recv()
            assert isinstance(frame, str)
            if marker in frame and '"method"' not in frame:
                return json.loads(frame), others
            if not others:
                self.first_other = frame
            others += 1

    def call(self, method: str, params: object) -> tuple[dict, int]:
        return self.until_response(self.send(method, params))

    def close(self) -> None:
        self.ws.close()


class Served:
    """`conductor serve CHAIN` on a free loopback port, for the WebSocket row."""

    TOKEN = "bench-token"

    def __init__(self, chain: Path) -> None:
        self.proc = subprocess.Popen(
            [PY, "-m", "conductor", "serve", str(chain), "--listen", "127.0.0.1:0"],
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "ACP_CONDUCTOR_TOKEN": self.TOKEN},
        )
        self.prefix = ""
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode()
            if line.startswith("listening on "):
                self.url = line.split()[2]
                break
        else:
            raise RuntimeError("conductor serve did not start")

    def connect(self) -> WsPipe:
        return WsPipe(self.url, self.TOKEN, self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


Target = Command | Served
_chains = 0


def chain_file(folder: Path, proxies: int, agent: list[str], plugin: str | None = None) -> Path:
    """A chain of `proxies` subprocess pass-through proxies, or of in-process `plugin`s
    (a name in bench/plugins.py, or a full `module:factory`). The agent runs in this
    checkout (its `cwd`), whichever conductor runs the chain."""
    global _chains
    _chains += 1
    if plugin is None:
        block = f"[[proxy]]\ncommand = {json.dumps(PROXY)}\n"
    else:
        spec = plugin if ":" in plugin else f"bench.plugins:{plugin}"
        block = f"[[proxy]]\nplugin = {json.dumps(spec)}\n"
    agent_table = f"[agent]\ncommand = {json.dumps(agent)}\ncwd = {json.dumps(str(ROOT))}\n"
    path = folder / f"bench-{_chains}-{proxies}-{plugin}.toml"
    path.write_text(block * proxies + agent_table)
    return path


def remote_chain(folder: Path, served: Served) -> Path:
    """A chain whose agent is the served chain `served`, reached over WebSocket."""
    path = folder / f"remote-{served.url.rsplit(':', 1)[1].split('/')[0]}.toml"
    path.write_text(
        f'[agent]\nurl = "{served.url}"\nheaders = {{ Authorization = "Bearer {Served.TOKEN}" }}\n'
    )
    return path


THINKWELL = ROOT / "bench" / "node_modules" / "@thinkwell" / "conductor"


def thinkwell(folder: Path, proxies: int, agent: list[str]) -> Command:
    """The same chain run by @thinkwell/conductor (`npm ci --prefix bench` installs it).

    It speaks an older proxy draft (`initialize` with `_meta.proxy`, and
    `_proxy/successor/request|notification`), so its proxies run in that dialect."""
    chain = {"proxies": [[*PROXY, "--dialect", "legacy"]] * proxies, "agent": agent}
    path = folder / f"thinkwell-{proxies}-{agent[-1]}.json"
    path.write_text(json.dumps(chain))
    return Command(["node", str(ROOT / "bench" / "thinkwell_stdio.mjs"), str(path)])


def open_session(target: Target) -> tuple[Pipe | WsPipe, str]:
    pipe = target.connect() if isinstance(target, Served) else Pipe(target)
    pipe.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    response, _ = pipe.call("session/new", {"cwd": str(ROOT), "mcpServers": []})
    return pipe, response["result"]["sessionId"]


@dataclass
class Sample:
    """One measurement: wall seconds and conductor CPU ns, per round trip or per update."""

    wall: float
    cpu: float
    seen: int = 0  # updates received (streaming)
    problem: str | None = None  # the reply was not what the agent sent


def prompt_rate(target: Target, prompts: int, warmup: int) -> Sample:
    """Seconds and conductor CPU per sequential prompt round trip (one update + the response)."""
    pipe, session = open_session(target)
    params = {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}
    for _ in range(warmup):
        pipe.call("session/prompt", params)
    _, seen = pipe.call("session/prompt", params)
    expected = target.prefix + "You said: hi"
    text = update_text(pipe.first_other)
    problem = None
    if seen != 1 or text != expected:
        problem = f"round trip: {seen} updates, first text {text!r}, expected {expected!r}"
    cpu_before = cpu_ns(pipe.pid)
    start = time.perf_counter()
    for _ in range(prompts):
        pipe.call("session/prompt", params)
    elapsed = time.perf_counter() - start
    cpu = cpu_ns(pipe.pid) - cpu_before
    pipe.close()
    return Sample(elapsed / prompts, cpu / prompts, problem=problem)


def stream_rate(target: Target, updates: int) -> Sample:
    """Seconds and conductor CPU per session/update notification of one long streamed reply."""
    pipe, session = open_session(target)
    text = "x" * updates
    params = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    cpu_before = cpu_ns(pipe.pid)
    start = time.perf_counter()
    _, seen = pipe.call("session/prompt", params)
    elapsed = time.perf_counter() - start
    cpu = cpu_ns(pipe.pid) - cpu_before
    pipe.close()
    first = update_text(pipe.first_other)
    problem = None
    if first is None or not first.startswith(target.prefix + "Y"):
        problem = f"stream: first text {first!r}, expected it to start {target.prefix + 'Y'!r}"
    return Sample(elapsed / max(seen, 1), cpu / max(seen, 1), seen, problem)


def soak(cmd: Command, prompts: int) -> tuple[int, int]:
    """Conductor RSS (kB) after 100 prompts and after `prompts` prompts."""
    pipe, session = open_session(cmd)
    assert isinstance(pipe, Pipe)
    params = {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}
    for _ in range(100):
        pipe.call("session/prompt", params)
    early = pipe.rss_kb()
    for _ in range(prompts - 100):
        pipe.call("session/prompt", params)
    late = pipe.rss_kb()
    pipe.close()
    return early, late


def init_time(cmd: Command) -> float:
    pipe = Pipe(cmd)
    start = time.perf_counter()
    pipe.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    elapsed = time.perf_counter() - start
    pipe.close()
    return elapsed


@dataclass
class Results:
    """Medians per row name."""

    trip: dict[str, float] = field(default_factory=dict)  # seconds per round trip
    trip_cpu: dict[str, float] = field(default_factory=dict)  # ns per round trip
    rate: dict[str, float] = field(default_factory=dict)  # updates per second
    update_cpu: dict[str, float] = field(default_factory=dict)  # ns per update

    def ratio(self, table: dict[str, float], a: str, b: str) -> float | None:
        if a not in table or b not in table or not table[b]:
            return None
        return table[a] / table[b]

    def extra_ratio(self, table: dict[str, float], a: str, b: str, base: str) -> float | None:
        """(a - base) / (b - base): what `a` adds over `base`, against what `b` adds."""
        if any(name not in table for name in (a, b, base)) or table[b] == table[base]:
            return None
        return (table[a] - table[base]) / (table[b] - table[base])

    def per_hop(self, prefix: str, n: int) -> float | None:
        """CPU ns per subprocess proxy hop: (CPU at n proxies - CPU at 0) / n."""
        zero, more = f"{prefix}, 0 proxies", f"{prefix}, {n} proxies"
        if zero not in self.trip_cpu or more not in self.trip_cpu:
            return None
        return (self.trip_cpu[more] - self.trip_cpu[zero]) / n


def show(value: float | None, digits: int = 2) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def check_baseline(folder: Path) -> Path:
    """Which conductor package `python -m conductor` imports with cwd=DIR, PYTHONPATH=DIR."""
    if not (folder / "conductor" / "__init__.py").is_file():
        sys.exit(f"--baseline {folder}: not a checkout of this repository (no conductor/)")
    out = subprocess.run(
        [PY, "-c", "import conductor; print(conductor.__file__)"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    imported = Path(out).resolve()
    if not imported.is_relative_to(folder.resolve()):
        sys.exit(f"--baseline {folder}: python imports {imported} instead of DIR's package")
    return imported


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=20000)
    parser.add_argument("--no-thinkwell", action="store_true", help="skip the competitor's rows")
    parser.add_argument(
        "--no-websocket",
        action="store_true",
        help="skip the served-chain rows (they need the websockets package, a test extra)",
    )
    parser.add_argument(
        "--soak", type=int, default=10000, help="prompts in the memory soak (0: skip)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another checkout of this repository: its conductor gets rows of its own",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="measure only rows whose name contains PATTERN or matches it as a glob "
        "(repeatable; direct is always measured)",
    )
    args = parser.parse_args()

    def selected(name: str) -> bool:
        if name == "direct" or not args.only:
            return True
        lowered = name.lower()
        return any(p.lower() in lowered or fnmatch.fnmatch(lowered, p.lower()) for p in args.only)

    baseline_env: dict[str, str] | None = None
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        imported = check_baseline(args.baseline)
        baseline_env = {**os.environ, "PYTHONPATH": str(args.baseline)}

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        streamer = [*AGENT[:-1], str(args.updates)]
        configs: dict[str, Target] = {}
        stream_configs: dict[str, Target] = {}

        def add(name: str, trip: Target, stream: Target) -> None:
            if selected(name):
                configs[name] = trip
                stream_configs[name] = stream

        add("direct", Command(AGENT), Command(streamer))

        def conductor(
            chain: Path, *options: str, baseline: bool = False, prefix: str = ""
        ) -> Command:
            argv = [PY, "-m", "conductor", *options, "run", str(chain)]
            if baseline:
                assert args.baseline is not None
                return Command(argv, args.baseline, baseline_env, prefix)
            return Command(argv, prefix=prefix)

        variants: list[tuple[int, str | None, str]] = [(n, None, f"{n} proxies") for n in (0, 1, 3)]
        variants += [(n, "PassThrough", f"{n} in-process pass-through") for n in (1, 3)]
        variants += [(n, "Inspecting", f"{n} in-process inspecting") for n in (1, 3)]
        variants += [(3, ARROW, "3 in-process arrow")]
        for n, plugin, label in variants:
            prefix = ARROW_PREFIX * n if plugin == ARROW else ""
            add(
                f"conductor, {label}",
                conductor(chain_file(folder, n, AGENT, plugin), prefix=prefix),
                conductor(chain_file(folder, n, streamer, plugin), prefix=prefix),
            )
        # The cost of --trace, measured side by side with the same chain.
        trace = ("--trace", str(folder / "trace.jsonl"))
        add(
            "conductor, 0 proxies, --trace",
            conductor(chain_file(folder, 0, AGENT), *trace),
            conductor(chain_file(folder, 0, streamer), *trace),
        )
        servers: list[Served] = []
        served_name = "conductor serve, 0 proxies, loopback WebSocket"
        remote_name = "conductor run, agent at url = (served, loopback)"
        if not args.no_websocket and (selected(served_name) or selected(remote_name)):
            # One server per agent flavour; every measurement opens its own connection, which
            # gets its own chain, as every pipe row starts its own conductor.
            servers = [
                Served(chain_file(folder, 0, AGENT)),
                Served(chain_file(folder, 0, streamer)),
            ]
            add(served_name, servers[0], servers[1])
            # A local conductor whose agent is `url =` a served chain (pipe, then WebSocket).
            add(
                remote_name,
                conductor(remote_chain(folder, servers[0])),
                conductor(remote_chain(folder, servers[1])),
            )
        has_thinkwell = THINKWELL.exists() and shutil.which("node") and not args.no_thinkwell
        if has_thinkwell:
            for n in (0, 1, 3):
                add(
                    f"thinkwell, {n} proxies",
                    thinkwell(folder, n, AGENT),
                    thinkwell(folder, n, streamer),
                )
        if args.baseline is not None:
            for n, plugin, label in [v for v in variants if v[1] in (None, ARROW)]:
                prefix = ARROW_PREFIX * n if plugin == ARROW else ""
                add(
                    f"baseline, {label}",
                    conductor(chain_file(folder, n, AGENT, plugin), baseline=True, prefix=prefix),
                    conductor(
                        chain_file(folder, n, streamer, plugin), baseline=True, prefix=prefix
                    ),
                )

        trips: dict[str, list[Sample]] = {name: [] for name in configs}
        streams: dict[str, list[Sample]] = {name: [] for name in configs}
        for _ in range(args.rounds):
            for name, target in configs.items():
                trips[name].append(prompt_rate(target, args.prompts, args.warmup))
                streams[name].append(stream_rate(stream_configs[name], args.updates))
        for server in servers:
            server.close()

        res = Results()
        problems: list[str] = []
        for name in configs:
            res.trip[name] = statistics.median(s.wall for s in trips[name])
            res.trip_cpu[name] = statistics.median(s.cpu for s in trips[name])
            res.rate[name] = 1 / statistics.median(s.wall for s in streams[name])
            res.update_cpu[name] = statistics.median(s.cpu for s in streams[name])
            problems += sorted({f"{name}: {s.problem}" for s in trips[name] if s.problem})
            problems += sorted({f"{name}: {s.problem}" for s in streams[name] if s.problem})
            counts = {s.seen for s in streams[name]} | {s.seen for s in streams["direct"]}
            if len(counts) > 1:
                problems.append(f"{name}: streamed {sorted(counts)} updates (direct and this row)")

        print(
            f"{args.rounds} rounds x {args.prompts} prompts (median); "
            f"streaming {args.updates} updates"
        )
        if args.baseline is not None:
            print(f"baseline: {args.baseline} (imports {imported})")
        print(
            "\n| configuration | per round trip | ratio | conductor CPU µs per round trip "
            "| updates/s | ratio | conductor CPU µs per update |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name in configs:
            direct = name == "direct"
            print(
                f"| {name} | {res.trip[name] * 1e6:.0f} µs "
                f"| {res.ratio(res.trip, name, 'direct'):.2f} "
                f"| {MISSING if direct else f'{res.trip_cpu[name] / 1e3:.0f}'} "
                f"| {res.rate[name]:,.0f} | {res.ratio(res.rate, name, 'direct'):.2f} "
                f"| {MISSING if direct else f'{res.update_cpu[name] / 1e3:.1f}'} |"
            )
        for problem in problems:
            print(f"WARNING, reply not as the agent sent it: {problem}")
        if not problems:
            print(
                "\nreplies checked: every row delivered the agent's text (with one "
                f"{ARROW_PREFIX!r} per arrow plugin) and as many streamed updates as direct"
            )

        prefixes = ["conductor"] + (["baseline"] if args.baseline is not None else [])
        if args.prompts + args.warmup < 1000 and any(n.startswith("thinkwell") for n in configs):
            print(
                "\nnote: fewer than 1000 prompts per measurement: node's JIT is still cold, so "
                "thinkwell's rows (and the ratios to them) are pessimistic for thinkwell"
            )
        report(res, prefixes, any(name.startswith("thinkwell") for name in configs))

        cmd3 = conductor(chain_file(folder, 3, AGENT))
        print(
            f"\ninitialize through 3 proxies: {init_time(cmd3) * 1000:.0f} ms "
            f"(agent alone: {init_time(Command(AGENT)) * 1000:.0f} ms)"
        )
        if args.soak:
            soaked = [("conductor", conductor(chain_file(folder, 0, AGENT)))]
            if args.baseline is not None:
                soaked.append(("baseline", conductor(chain_file(folder, 0, AGENT), baseline=True)))
            for who, cmd in soaked:
                early, late = soak(cmd, args.soak)
                print(
                    f"{who} RSS after 100 prompts: {early / 1024:.1f} MB; after {args.soak}: "
                    f"{late / 1024:.1f} MB (growth {(late - early) / 1024:.1f} MB; target < 5)"
                )


def report(res: Results, prefixes: list[str], has_thinkwell: bool) -> None:
    """Derived figures, then the targets table of performance.md."""
    hops: dict[str, dict[int, float | None]] = {
        who: {n: res.per_hop(who, n) for n in (1, 3)} for who in [*prefixes, "thinkwell"]
    }
    print("\nconductor CPU per subprocess proxy hop, (CPU at n proxies - CPU at 0) / n, µs:")
    for who, by_n in hops.items():
        if who == "thinkwell" and not has_thinkwell:
            continue
        cells = [f"n={n}: {show(None if v is None else v / 1e3, 0)}" for n, v in by_n.items()]
        print(f"  {who}: {'; '.join(cells)}")
    for who in prefixes:
        ratios = [hop_ratio(hops, who, n) for n in (1, 3)]
        print(f"  {who} / thinkwell: n=1: {show(ratios[0])}; n=3: {show(ratios[1])} (target <= 1)")
    print(
        "\nextra cost of 3 in-process arrow plugins / extra cost of 3 subprocess proxies "
        "(each minus 0 proxies; target <= 0.2):"
    )
    for who in prefixes:
        wall, cpu = arrow_ratios(res, who)
        print(f"  {who}: wall {show(wall)}; conductor CPU {show(cpu)}")

    columns = "".join(f" {who} |" for who in prefixes)
    print(f"\n| figure (performance.md targets) | target |{columns}")
    print("| --- | --- |" + " --- |" * len(prefixes))

    def line(figure: str, target: str, values: list[float | None], bound: float, low: bool) -> None:
        """One figure per conductor; `low`: the target is value <= bound, else value >= bound."""
        cells = ""
        for value in values:
            met = value is not None and (value <= bound if low else value >= bound)
            verdict = "" if value is None else (" ok" if met else " MISSED")
            cells += f" {show(value)}{verdict} |"
        print(f"| {figure} | {target} |{cells}")

    line(
        "0 proxies / direct (round trip)",
        "<= 1.5",
        [res.ratio(res.trip, f"{w}, 0 proxies", "direct") for w in prefixes],
        1.5,
        True,
    )
    for n in (0, 1, 3):
        line(
            f"/ thinkwell, {n} proxies (round trip)",
            "<= 0.6",
            [res.ratio(res.trip, f"{w}, {n} proxies", f"thinkwell, {n} proxies") for w in prefixes],
            0.6,
            True,
        )
    line(
        "3 in-process arrow / 0 proxies (round trip)",
        "<= 1.3",
        [res.ratio(res.trip, f"{w}, 3 in-process arrow", f"{w}, 0 proxies") for w in prefixes],
        1.3,
        True,
    )
    line(
        "extra wall, 3 arrow / 3 subprocess",
        "<= 0.2",
        [arrow_ratios(res, w)[0] for w in prefixes],
        0.2,
        True,
    )
    line(
        "extra CPU, 3 arrow / 3 subprocess",
        "<= 0.2",
        [arrow_ratios(res, w)[1] for w in prefixes],
        0.2,
        True,
    )
    for n in (1, 3):
        line(
            f"CPU per subprocess hop / thinkwell's (n={n})",
            "<= 1",
            [hop_ratio(hops, w, n) for w in prefixes],
            1.0,
            True,
        )
    line(
        "streaming rate, 0 proxies / direct",
        ">= 0.7",
        [res.ratio(res.rate, f"{w}, 0 proxies", "direct") for w in prefixes],
        0.7,
        False,
    )


def hop_ratio(hops: dict[str, dict[int, float | None]], who: str, n: int) -> float | None:
    ours, theirs = hops[who][n], hops["thinkwell"][n]
    return None if ours is None or not theirs else ours / theirs


def arrow_ratios(res: Results, who: str) -> tuple[float | None, float | None]:
    a, b, base = f"{who}, 3 in-process arrow", f"{who}, 3 proxies", f"{who}, 0 proxies"
    return res.extra_ratio(res.trip, a, b, base), res.extra_ratio(res.trip_cpu, a, b, base)


if __name__ == "__main__":
    main()
