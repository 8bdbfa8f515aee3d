"""Flow control (`conductor/flow.py`) as pure logic: who pauses, when they resume, and the
pauses refused because they would deadlock the chain. No I/O, no clock."""

from __future__ import annotations

from conductor.flow import HARD_LIMIT, HIGH_WATER, LOW_WATER, Flow, Peer


class Watched(Peer):
    """A peer that counts its pause and resume callbacks."""

    def __init__(self, name: str, blocking: bool = True) -> None:
        super().__init__(name, blocking)
        self.pauses = 0
        self.resumes = 0
        self.on_pause = self._paused
        self.on_resume = self._resumed

    def _paused(self) -> None:
        self.pauses += 1

    def _resumed(self) -> None:
        self.resumes += 1


def _burst(flow: Flow, source: Peer | None, *writes: tuple[Peer, int]) -> None:
    previous = flow.begin(source)
    for sink, size in writes:
        flow.wrote(sink, size)
    flow.end(previous)


def test_a_source_pauses_on_a_congested_destination_it_wrote_to() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    assert editor.paused and editor.pauses == 1
    assert editor.waits_on == {agent} and agent.waiters == {editor}


def test_at_the_high_water_mark_nobody_pauses() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    _burst(flow, editor, (agent, HIGH_WATER))
    assert not editor.paused and editor.pauses == 0


def test_only_the_source_that_wrote_to_the_congested_destination_pauses() -> None:
    flow = Flow()
    editor, proxy, agent, other = (Watched(n) for n in ("editor", "proxy", "agent", "other"))
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    _burst(flow, proxy, (other, 10))  # a slow agent must not stop a proxy writing elsewhere
    assert editor.paused and not proxy.paused and proxy.pauses == 0


def test_another_source_writing_to_the_same_congested_destination_pauses_too() -> None:
    flow = Flow()
    editor, proxy, agent = Watched("editor", blocking=False), Watched("proxy"), Watched("agent")
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    _burst(flow, proxy, (agent, 1))
    assert editor.paused and proxy.paused
    assert agent.waiters == {editor, proxy}


def test_writes_without_a_source_pause_nobody() -> None:
    flow, agent = Flow(), Watched("agent")
    _burst(flow, None, (agent, HIGH_WATER * 10))
    assert agent.waiters == set()


def test_a_source_resumes_at_the_low_water_mark_not_before() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    flow.sent(agent, HIGH_WATER + 1 - (LOW_WATER + 1))
    assert agent.backlog == LOW_WATER + 1
    assert editor.paused and editor.resumes == 0
    flow.sent(agent, 1)
    assert not editor.paused and editor.resumes == 1
    assert agent.waiters == set() and editor.waits_on == set()


def test_a_source_waiting_on_two_destinations_resumes_when_both_drained() -> None:
    flow = Flow()
    editor, a, b = Watched("editor", blocking=False), Watched("a"), Watched("b")
    _burst(flow, editor, (a, HIGH_WATER + 1), (b, HIGH_WATER + 1))
    assert editor.pauses == 1 and editor.waits_on == {a, b}
    flow.sent(a, HIGH_WATER + 1)
    assert editor.paused and editor.resumes == 0
    flow.sent(b, HIGH_WATER + 1)
    assert not editor.paused and editor.resumes == 1


def test_the_pause_is_taken_at_the_end_of_the_burst() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    previous = flow.begin(editor)
    flow.wrote(agent, HIGH_WATER + 1)
    assert not editor.paused, "the burst finishes what it started"
    flow.end(previous)
    assert editor.paused


def test_a_destination_drained_within_the_burst_pauses_nobody() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    previous = flow.begin(editor)
    flow.wrote(agent, HIGH_WATER + 1)
    flow.sent(agent, HIGH_WATER + 1)
    flow.end(previous)
    assert not editor.paused


def test_pausing_again_after_resuming() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    for round_ in range(1, 4):
        _burst(flow, editor, (agent, HIGH_WATER + 1))
        assert editor.paused and editor.pauses == round_
        flow.sent(agent, HIGH_WATER + 1)
        assert not editor.paused and editor.resumes == round_


def test_nested_bursts_are_attributed_to_their_own_source() -> None:
    """`begin` returns the previous source for `end`: a burst inside another one pauses its
    own source for its own writes, and the outer source for the outer writes."""
    flow = Flow()
    outer, inner, agent, other = Watched("outer"), Watched("inner"), Watched("agent"), Watched("x")
    first = flow.begin(outer)
    flow.wrote(agent, HIGH_WATER + 1)
    second = flow.begin(inner)
    flow.wrote(other, 10)
    flow.end(second)
    flow.end(first)
    assert outer.paused, "the outer source wrote to the congested agent"
    assert not inner.paused, "the inner source wrote only to an idle peer"


# ------------------------------------------------------------------ deadlocks


def test_a_pause_that_would_close_a_cycle_of_blocking_peers_is_refused_and_counted() -> None:
    flow, proxy, agent = Flow(), Watched("proxy"), Watched("agent")
    _burst(flow, agent, (proxy, HIGH_WATER + 1))  # the agent waits for the proxy
    assert agent.paused
    _burst(flow, proxy, (agent, HIGH_WATER + 1))  # the proxy waiting for the agent: a cycle
    assert not proxy.paused and proxy.pauses == 0
    assert flow.refused == 1


def test_a_longer_cycle_is_refused_too() -> None:
    flow = Flow()
    a, b, c = Watched("a"), Watched("b"), Watched("c")
    _burst(flow, a, (b, HIGH_WATER + 1))
    _burst(flow, b, (c, HIGH_WATER + 1))
    assert a.paused and b.paused
    _burst(flow, c, (a, HIGH_WATER + 1))
    assert not c.paused and flow.refused == 1


def test_a_chain_of_waits_without_a_cycle_pauses() -> None:
    flow = Flow()
    a, b, c = Watched("a"), Watched("b"), Watched("c")
    _burst(flow, a, (b, HIGH_WATER + 1))
    _burst(flow, b, (c, HIGH_WATER + 1))
    assert a.paused and b.paused and flow.refused == 0


def test_a_non_blocking_source_is_always_paused() -> None:
    """The editor is assumed to read what it is sent: pausing it never deadlocks."""
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    _burst(flow, agent, (editor, HIGH_WATER + 1))
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    assert editor.paused and agent.paused and flow.refused == 0


def test_a_cycle_through_a_non_blocking_peer_is_no_deadlock() -> None:
    flow = Flow()
    editor, proxy, agent = Watched("editor", blocking=False), Watched("proxy"), Watched("agent")
    _burst(flow, proxy, (editor, HIGH_WATER + 1))  # the proxy waits for the editor
    _burst(flow, editor, (agent, HIGH_WATER + 1))  # the editor waits for the agent
    _burst(flow, agent, (proxy, HIGH_WATER + 1))  # agent -> proxy -> editor (reads) -> ...
    assert agent.paused and flow.refused == 0


def test_the_hard_limit_pauses_even_at_the_risk_of_a_deadlock() -> None:
    flow, proxy, agent = Flow(), Watched("proxy"), Watched("agent")
    _burst(flow, agent, (proxy, HIGH_WATER + 1))
    _burst(flow, proxy, (agent, HARD_LIMIT + 1))
    assert proxy.paused and flow.refused == 0


def test_at_the_hard_limit_itself_the_deadlock_check_still_holds() -> None:
    flow, proxy, agent = Flow(), Watched("proxy"), Watched("agent")
    _burst(flow, agent, (proxy, HIGH_WATER + 1))
    _burst(flow, proxy, (agent, HARD_LIMIT))
    assert not proxy.paused and flow.refused == 1


def test_a_refused_pause_is_tried_again_on_the_next_burst() -> None:
    flow, proxy, agent = Flow(), Watched("proxy"), Watched("agent")
    _burst(flow, agent, (proxy, HIGH_WATER + 1))
    _burst(flow, proxy, (agent, HIGH_WATER + 1))
    assert not proxy.paused
    flow.sent(proxy, HIGH_WATER + 1)  # the agent resumes: no cycle any more
    assert not agent.paused
    _burst(flow, proxy, (agent, 1))
    assert proxy.paused and flow.refused == 1


# ----------------------------------------------------------------- gone, holds


def test_gone_releases_every_waiter_and_drops_the_backlog() -> None:
    flow = Flow()
    editor, proxy, agent = Watched("editor", blocking=False), Watched("proxy"), Watched("agent")
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    _burst(flow, proxy, (agent, 1))
    flow.gone(agent)
    assert agent.backlog == 0 and agent.waiters == set()
    assert not editor.paused and not proxy.paused
    assert editor.resumes == 1 and proxy.resumes == 1


def test_gone_without_waiters_only_drops_the_backlog() -> None:
    flow, agent = Flow(), Watched("agent")
    flow.wrote(agent, 100)
    flow.gone(agent)
    assert agent.backlog == 0


def test_holds_pause_until_every_hold_is_released() -> None:
    peer = Watched("editor", blocking=False)
    peer.hold()
    peer.hold()
    assert peer.paused and peer.pauses == 1
    peer.release()
    assert peer.paused and peer.resumes == 0
    peer.release()
    assert not peer.paused and peer.resumes == 1


def test_a_held_source_does_not_resume_when_its_destination_drains() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    editor.hold()
    assert editor.pauses == 1, "already paused: no second pause"
    flow.sent(agent, HIGH_WATER + 1)
    assert editor.paused and editor.resumes == 0
    editor.release()
    assert not editor.paused and editor.resumes == 1


def test_a_released_hold_does_not_resume_a_source_still_waiting() -> None:
    flow, editor, agent = Flow(), Watched("editor", blocking=False), Watched("agent")
    editor.hold()
    _burst(flow, editor, (agent, HIGH_WATER + 1))
    editor.release()
    assert editor.paused and editor.resumes == 0
    flow.sent(agent, HIGH_WATER + 1)
    assert not editor.paused and editor.resumes == 1
