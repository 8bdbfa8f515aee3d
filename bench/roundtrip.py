"""Benchmark: prompt round trips and update streaming, direct vs through the conductor.

Not a test: run it on demand and read the table. Every configuration is measured
side by side in alternating rounds, and reported as a ratio to talking to the
demo agent directly in the same run (these machines are shared and noisy).

    python bench/roundtrip.py [--prompts 2000] [--rounds 5] [--updates 20000]

The WebSocket row runs `conductor serve` on a loopback port and drives it with the
`websockets` package's blocking client (a test extra), one connection per measurement.

With node and `npm ci --prefix bench`, @thinkwell/conductor (a competing TypeScript
conductor) is measured in the same run with the same agent and proxies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
AGENT = [PY, "-m", "conductor.demo_agent", "--chunks", "1"]
PROXY = [PY, str(ROOT / "tests" / "fixtures" / "passthrough_proxy.py")]


class Pipe:
    """A minimal blocking JSON-lines client: the cheapest possible editor."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, cwd=ROOT
        )
        assert self.proc.stdin and self.proc.stdout
        self.w = self.proc.stdin.fileno()
        self.r = self.proc.stdout.fileno()
        self.lines: list[bytes] = []
        self.tail = b""
        self.next_id = 0

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

    def __init__(self, url: str, token: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            max_size=None,
            proxy=None,
            compression=None,
            legacy=True,
        )
        self.next_id = 0

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
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode()
            if line.startswith("listening on "):
                self.url = line.split()[2]
                break
        else:
            raise RuntimeError("conductor serve did not start")

    def connect(self) -> WsPipe:
        return WsPipe(self.url, self.TOKEN)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


Target = list[str] | Served


def chain_file(folder: Path, proxies: int, agent: list[str], plugin: str | None = None) -> Path:
    """A chain of `proxies` subprocess pass-through proxies, or of in-process `plugin`s."""
    if plugin is None:
        block = f"[[proxy]]\ncommand = {json.dumps(PROXY)}\n"
    else:
        block = f'[[proxy]]\nplugin = "bench.plugins:{plugin}"\n'
    text = block * proxies + f"[agent]\ncommand = {json.dumps(agent)}\n"
    path = folder / f"bench-{proxies}-{plugin}-{len(agent)}-{agent[-1]}.toml"
    path.write_text(text)
    return path


def remote_chain(folder: Path, served: Served) -> Path:
    """A chain whose agent is the served chain `served`, reached over WebSocket."""
    path = folder / f"remote-{served.url.rsplit(':', 1)[1].split('/')[0]}.toml"
    path.write_text(
        f'[agent]\nurl = "{served.url}"\nheaders = {{ Authorization = "Bearer {Served.TOKEN}" }}\n'
    )
    return path


THINKWELL = ROOT / "bench" / "node_modules" / "@thinkwell" / "conductor"


def thinkwell(folder: Path, proxies: int, agent: list[str]) -> list[str]:
    """The same chain run by @thinkwell/conductor (`npm ci --prefix bench` installs it).

    It speaks an older proxy draft (`initialize` with `_meta.proxy`, and
    `_proxy/successor/request|notification`), so its proxies run in that dialect."""
    chain = {"proxies": [[*PROXY, "--dialect", "legacy"]] * proxies, "agent": agent}
    path = folder / f"thinkwell-{proxies}-{agent[-1]}.json"
    path.write_text(json.dumps(chain))
    return ["node", str(ROOT / "bench" / "thinkwell_stdio.mjs"), str(path)]


def open_session(target: Target) -> tuple[Pipe | WsPipe, str]:
    pipe = target.connect() if isinstance(target, Served) else Pipe(target)
    pipe.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    response, _ = pipe.call("session/new", {"cwd": str(ROOT), "mcpServers": []})
    return pipe, response["result"]["sessionId"]


def prompt_rate(target: Target, prompts: int, warmup: int) -> float:
    """Seconds per sequential prompt round trip (one update + the response each)."""
    pipe, session = open_session(target)
    params = {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}
    for _ in range(warmup):
        pipe.call("session/prompt", params)
    start = time.perf_counter()
    for _ in range(prompts):
        pipe.call("session/prompt", params)
    elapsed = time.perf_counter() - start
    pipe.close()
    return elapsed / prompts


def stream_rate(target: Target, updates: int) -> float:
    """session/update notifications per second for one long streamed reply."""
    pipe, session = open_session(target)
    text = "x" * updates
    params = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    start = time.perf_counter()
    _, seen = pipe.call("session/prompt", params)
    elapsed = time.perf_counter() - start
    pipe.close()
    return seen / elapsed


def soak(argv: list[str], prompts: int) -> tuple[int, int]:
    """Conductor RSS (kB) after 100 prompts and after `prompts` prompts."""
    pipe, session = open_session(argv)
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


def init_time(argv: list[str]) -> float:
    pipe = Pipe(argv)
    start = time.perf_counter()
    pipe.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    elapsed = time.perf_counter() - start
    pipe.close()
    return elapsed


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
        help="skip the served-chain row (it needs the websockets package, a test extra)",
    )
    parser.add_argument(
        "--soak", type=int, default=10000, help="prompts in the memory soak (0: skip)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        streamer = [*AGENT[:-1], str(args.updates)]
        configs: dict[str, Target] = {"direct": AGENT}
        stream_configs: dict[str, Target] = {"direct": streamer}
        variants = [(n, None, f"conductor, {n} proxies") for n in (0, 1, 3)]
        variants += [(n, "PassThrough", f"conductor, {n} in-process pass-through") for n in (1, 3)]
        variants += [(n, "Inspecting", f"conductor, {n} in-process inspecting") for n in (1, 3)]

        def conductor(chain: Path, *options: str) -> list[str]:
            return [PY, "-m", "conductor", *options, "run", str(chain)]

        for n, plugin, name in variants:
            configs[name] = conductor(chain_file(folder, n, AGENT, plugin))
            stream_configs[name] = conductor(chain_file(folder, n, streamer, plugin))
        # The cost of --trace, measured side by side with the same chain.
        trace = ("--trace", str(folder / "trace.jsonl"))
        configs["conductor, 0 proxies, --trace"] = conductor(chain_file(folder, 0, AGENT), *trace)
        stream_configs["conductor, 0 proxies, --trace"] = conductor(
            chain_file(folder, 0, streamer), *trace
        )
        servers: list[Served] = []
        if not args.no_websocket:
            # One server per agent flavour; every measurement opens its own connection, which
            # gets its own chain, as every pipe row starts its own conductor.
            servers = [
                Served(chain_file(folder, 0, AGENT)),
                Served(chain_file(folder, 0, streamer)),
            ]
            configs["conductor serve, 0 proxies, loopback WebSocket"] = servers[0]
            stream_configs["conductor serve, 0 proxies, loopback WebSocket"] = servers[1]
            # A local conductor whose agent is `url =` a served chain (pipe, then WebSocket).
            remote = "conductor run, agent at url = (served, loopback)"
            configs[remote] = conductor(remote_chain(folder, servers[0]))
            stream_configs[remote] = conductor(remote_chain(folder, servers[1]))
        if THINKWELL.exists() and shutil.which("node") and not args.no_thinkwell:
            for n in (0, 1, 3):
                name = f"thinkwell, {n} proxies"
                configs[name] = thinkwell(folder, n, AGENT)
                stream_configs[name] = thinkwell(folder, n, streamer)
        trips: dict[str, list[float]] = {name: [] for name in configs}
        streams: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(args.rounds):
            for name, argv in configs.items():
                trips[name].append(prompt_rate(argv, args.prompts, args.warmup))
                streams[name].append(stream_rate(stream_configs[name], args.updates))

        direct_trip = statistics.median(trips["direct"])
        direct_stream = statistics.median(streams["direct"])
        print(
            f"{args.rounds} rounds x {args.prompts} prompts (median); streaming {args.updates} updates\n"
        )
        print("| configuration | per round trip | ratio | updates/s | ratio |")
        print("| --- | --- | --- | --- | --- |")
        for name in configs:
            trip = statistics.median(trips[name])
            stream = statistics.median(streams[name])
            print(
                f"| {name} | {trip * 1e6:.0f} µs | {trip / direct_trip:.2f} "
                f"| {stream:,.0f} | {stream / direct_stream:.2f} |"
            )
        if "thinkwell, 0 proxies" in configs:
            print("\nthis conductor / @thinkwell/conductor 0.5.7, same proxies, same run:")
            for n in (0, 1, 3):
                ours = statistics.median(trips[f"conductor, {n} proxies"])
                theirs = statistics.median(trips[f"thinkwell, {n} proxies"])
                print(f"  {n} proxies: round trip {ours / theirs:.2f}")
        for server in servers:
            server.close()
        three = configs["conductor, 3 proxies"]
        assert isinstance(three, list)
        print(
            f"\ninitialize through 3 proxies: {init_time(three) * 1000:.0f} ms "
            f"(agent alone: {init_time(AGENT) * 1000:.0f} ms)"
        )
        if args.soak:
            zero = configs["conductor, 0 proxies"]
            assert isinstance(zero, list)
            early, late = soak(zero, args.soak)
            print(
                f"conductor RSS after 100 prompts: {early / 1024:.1f} MB; after {args.soak}: "
                f"{late / 1024:.1f} MB (growth {(late - early) / 1024:.1f} MB)"
            )


if __name__ == "__main__":
    main()
