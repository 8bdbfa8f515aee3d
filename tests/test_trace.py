"""--trace: the logical message flow, one event per message, in routed order."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from conftest import (
    allow_permission,
    demo_agent_block,
    plugin_block,
    prompt_params,
    proxy_block,
    read_jsonl,
    start_session,
)


def _run(conductor, chain: Path, trace: Path) -> None:
    peer = conductor(chain, "--trace", str(trace))
    session = start_session(peer)
    peer.request(5, "session/prompt", prompt_params(session, "ask permission"))
    allow_permission(peer)
    peer.response(5)
    peer.close_stdin()
    assert peer.wait() == 0


def _shape(event: dict) -> str:
    what = event.get("method") or ("error" if event["is_error"] else "result")
    return f"{event['type'][0]} {event['from']}>{event['to']} {what}"


@pytest.mark.parametrize("proxies", [0, 1, 2])
def test_trace_snapshot(make_chain, conductor, tmp_path, proxies):
    names = [f"p{i}" for i in range(1, proxies + 1)]
    chain = make_chain("".join(proxy_block(name=n) for n in names) + demo_agent_block(name="agent"))
    trace = tmp_path / "trace.jsonl"
    _run(conductor, chain, trace)
    events = read_jsonl(trace)
    path = ["editor", *names, "agent"]
    down = list(itertools.pairwise(path))
    up = [(b, a) for a, b in reversed(down)]

    def call(method: str, direction: list) -> list[str]:
        return [f"r {a}>{b} {method}" for a, b in direction]

    def results(direction: list) -> list[str]:
        return [f"r {a}>{b} result" for a, b in direction]

    expected = call("initialize", down) + results(up) + call("session/new", down) + results(up)
    expected += call("session/prompt", down)
    shapes = [_shape(e) for e in events]
    assert shapes[: len(expected)] == expected
    # The permission request goes up hop by hop and its answer comes down, then the turn ends.
    assert [s for s in shapes if "request_permission" in s] == call(
        "session/request_permission", up
    )
    first_answer = shapes.index(f"r editor>{path[1]} result", len(expected))
    assert shapes[first_answer : first_answer + len(down)] == results(down)
    tail = [s for s in shapes[first_answer:] if s.endswith(" result")]
    assert tail[-len(up) :] == results(up) and shapes[-1] == results(up)[-1]
    updates = [e for e in events if e.get("method") == "session/update"]
    assert updates and all(e["session"] == "sess-1" for e in updates)
    assert len(updates) == (len(path) - 1) * len([e for e in updates if e["from"] == "agent"])
    # Times only go forward; ids pair requests with their responses on each hop.
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    opened = {(e["from"], e["to"], e["id"]) for e in events if e["type"] == "request"}
    for e in events:
        if e["type"] == "response":
            assert (e["to"], e["from"], e["id"]) in opened, e


def test_trace_shows_plugins_batches_and_conductor_errors(make_chain, conductor, tmp_path):
    chain = make_chain(
        plugin_block("proxies.arrow:ArrowProxy", "inprocess", "arrow")
        + demo_agent_block(name="agent")
    )
    trace = tmp_path / "trace.jsonl"
    peer = conductor(chain, "--trace", str(trace))
    session = start_session(peer)
    prompt = {"jsonrpc": "2.0", "id": "b1", "method": "session/prompt"}
    peer.send([{**prompt, "params": prompt_params(session, "hi")}, 7])
    peer.read_until(lambda m: isinstance(m, list))
    peer.request(9, "initialize", {"protocolVersion": 1})
    peer.response(9)
    peer.close_stdin()
    peer.wait()
    events = read_jsonl(trace)
    batch = [e for e in events if "batch" in e]
    # arrow hooks prompts: it is a hop of its own, with the answer passing back through it.
    shapes = {_shape(e) for e in batch}
    assert shapes >= {"r editor>arrow session/prompt", "r conductor>editor error"}
    hops = {"r arrow>agent session/prompt", "r agent>arrow result", "r arrow>editor result"}
    assert hops <= {_shape(e) for e in events}
    assert len({e["batch"] for e in batch}) == 1
    assert _shape(events[-1]) == "r conductor>editor error"
    assert events[-1]["payload"]["data"] == "already initialized"


def test_proxy_mode_names_the_successor(make_chain, conductor, tmp_path):
    chain = make_chain(proxy_block(name="only"))
    trace = tmp_path / "trace.jsonl"
    peer = conductor(chain, "--trace", str(trace))
    peer.request(1, "_proxy/initialize", {"protocolVersion": 1})
    envelope = peer.read()
    peer.send({"jsonrpc": "2.0", "id": envelope["id"], "result": {"protocolVersion": 1}})
    peer.response(1)
    peer.close_stdin()
    peer.wait()
    shapes = [_shape(e) for e in read_jsonl(trace)]
    assert shapes == [
        "r editor>only initialize",
        "r only>successor initialize",
        "r successor>only result",
        "r only>editor result",
    ]


def test_no_trace_file_without_the_option(make_chain, conductor, tmp_path):
    chain = make_chain(demo_agent_block())
    peer = conductor(chain)
    start_session(peer)
    peer.close_stdin()
    peer.wait()
    assert not list(tmp_path.glob("*.jsonl"))


def test_debug_log_shows_every_line_in_and_out(make_chain, conductor, tmp_path):
    log = tmp_path / "debug.log"
    chain = make_chain(proxy_block(name="p1") + demo_agent_block(name="agent"))
    peer = conductor(chain, "--log-level", "debug", "--log-file", str(log))
    start_session(peer)
    peer.close_stdin()
    assert peer.wait() == 0
    text = log.read_text()
    for fragment in [
        "editor -> conductor: ",
        "conductor -> p1: ",
        "p1 -> conductor: ",
        "conductor -> agent: ",
        "agent -> conductor: ",
        "conductor -> editor: ",
        "started agent 'agent'",
        "exited with status 0",
    ]:
        assert fragment in text, fragment
    assert "[conductor +" in text
    assert "DEBUG" not in peer.stderr
