"""A writer whose Consul session became invalid (a restarted agent, a
destroyed session) campaigns again with a new session at once, instead of
retrying the dead one until its renewal is due; and a writer holding its
locks confirms them without reading every lock each cycle. Real Consul, the
real leadership thread, in process."""

from __future__ import annotations

import json
import logging
import queue
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import running_agent, wait_for
from tests.controlplane_integration.conftest import kv_client
from zmqueue.controlplane import leadership
from zmqueue.controlplane.leadership import Leadership
from zmqueue.controlplane.writer_election import (
    Candidacy,
    Confirmed,
    Deposed,
    Elected,
    Event,
    Opened,
    lock_key,
)
from zmqueue.localcluster import ConsulAgent


def test_a_session_consul_calls_invalid_is_replaced_at_once(
        consul_agent: ConsulAgent, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # renewal every 20 s: retrying the dead session until then would miss the deadline below
    monkeypatch.setattr(leadership, "SESSION_TTL_S", 60)
    caplog.set_level(logging.WARNING, logger="zmqueue.controlplane.leadership")
    node = f"lead-{uuid.uuid4().hex[:8]}"
    stream = (f"q-{node}", 0, node)
    events: queue.Queue[Event] = queue.Queue()
    lead = Leadership((consul_agent.http_addr,), 2.0, node, [], {"node": node}, events.put)
    lead.update({stream: Candidacy((node,), node)}, {stream: (0, 0)})
    seen: list[Event] = []

    def got(kind: type, after: int = 0) -> Event | None:
        while not events.empty():
            seen.append(events.get_nowait())
        mine = [e for e in seen[after:] if isinstance(e, Elected | Deposed) and e.stream == stream]
        return next((e for e in mine if isinstance(e, kind)), None)

    lead.start()
    try:
        first = wait_for(lambda: got(Elected), 15, "the first election")
        assert isinstance(first, Elected)
        old = lead.session
        assert old is not None
        kv_client(consul_agent.http_addr).session.destroy(old)  # its lock is released
        wait_for(lambda: got(Deposed, seen.index(first)), 10, "deposed once the lock is gone")
        mark = len(seen)
        again = wait_for(lambda: got(Elected, mark), 10, "elected again with a new session")
        assert isinstance(again, Elected) and again.epoch > first.epoch
        assert lead.session not in (None, old)
        assert "leadership cycle: 500 invalid session" not in caplog.text
    finally:
        lead.stop()
        lead.join(10)
    assert not lead.is_alive()


def test_steady_cycles_confirm_leases_without_reading_every_lock(tmp_path: Path) -> None:
    """Holding every lock, a cycle confirms them from the prefix's index alone
    (no full read of ``leaders/``); any change under the prefix (another
    lock taken, this host's lock deleted) is seen within a cycle or two."""
    node = f"lead-{uuid.uuid4().hex[:8]}"
    stream = (f"q-{node}", 0, node)
    events: queue.Queue[Event] = queue.Queue()
    with running_agent(tmp_path / "consul") as agent:
        c = kv_client(agent.http_addr)
        lead = Leadership((agent.http_addr,), 2.0, node, [], {"node": node}, events.put)
        lead.update({stream: Candidacy((node,), node)}, {stream: (0, 0)})
        seen: list[Event] = []

        def drain() -> list[Event]:
            while not events.empty():
                seen.append(events.get_nowait())
            return seen

        def confirmed_since(mark: int) -> int:
            return sum(1 for e in drain()[mark:] if isinstance(e, Confirmed) and stream in e.streams)

        lead.start()
        try:
            wait_for(lambda: any(isinstance(e, Elected) for e in drain()), 15, "the election")
            # let the busy period after the election pass, then watch steady cycles
            wait_for(lambda: time.monotonic() >= lead._busy_until, 10, "the steady state")
            reads, mark = lead.full_reads, len(drain())
            wait_for(lambda: confirmed_since(mark) >= 4, 10, "four steady confirmations")
            assert lead.full_reads == reads, "a steady cycle read every lock"

            # another stream's lock taken by someone else moves the index
            other = c.session.create(behavior="release", lock_delay=0, ttl=30)
            assert c.kv.put(lock_key(("other", 0, "x")), b"{}", acquire=other)
            wait_for(lambda: lead.full_reads > reads, 15, "a full read after a foreign lock moved")

            # this host's own lock deleted under it: deposed, not confirmed on
            mark = len(drain())
            c.kv.delete(lock_key(stream))
            wait_for(lambda: any(isinstance(e, Deposed) and e.stream == stream
                                 for e in drain()[mark:]), 15, "deposed after the lock was deleted")
        finally:
            lead.stop()
            lead.join(10)
        assert not lead.is_alive()


def test_a_stream_asked_to_open_is_marked_in_consul_before_it_hears_so(consul_agent: ConsulAgent) -> None:
    """A writer acknowledges a stream's first records only once its position
    in Consul is marked opened: the thread answers an ``opening`` stream with
    Opened after Consul has the mark, publishes no mark unasked, keeps the
    mark in later publications, and marks again a stream that left and came
    back (its key may have been removed meanwhile)."""
    node = f"lead-{uuid.uuid4().hex[:8]}"
    asked, quiet = (f"q-{node}", 0, node), (f"q-{node}", 1, node)
    events: queue.Queue[Event] = queue.Queue()
    c = kv_client(consul_agent.http_addr)
    lead = Leadership((consul_agent.http_addr,), 2.0, node, [], {"node": node}, events.put)
    cands = {s: Candidacy((node,), node) for s in (asked, quiet)}
    lead.update(cands, {asked: (0, 0), quiet: (0, 0)})

    def value(s: tuple[str, int, str]) -> dict[str, int] | None:
        _, item = c.kv.get(f"zmqueue-positions/{s[0]}/{s[1]}/{s[2]}/{node}")
        return None if item is None else json.loads(item["Value"])

    answers: list[Opened] = []

    def opened(n: int) -> bool:
        while not events.empty():
            ev = events.get_nowait()
            if isinstance(ev, Opened):
                assert ev.stream == asked, ev
                assert (value(asked) or {}).get("opened") == 1, "Opened before the mark was in Consul"
                answers.append(ev)
        return len(answers) >= n

    lead.start()
    try:
        wait_for(lambda: value(quiet) is not None, 15, "the positions published")
        lead.update(cands, {asked: (0, 0), quiet: (0, 0)}, opening={asked})
        wait_for(lambda: opened(1), 10, "Opened for the stream asked")
        assert value(quiet) == {"epoch": 0, "seq": 0}
        lead.update(cands, {asked: (1, 5), quiet: (0, 0)})  # (published within POSITIONS_EVERY_S)
        wait_for(lambda: value(asked) == {"epoch": 1, "seq": 5, "opened": 1}, 10, "the mark kept")
        lead.update({quiet: cands[quiet]}, {quiet: (0, 0)})  # the stream leaves this host
        wait_for(lambda: asked not in lead._opened, 10, "the mark forgotten with the stream")
        c.kv.delete(f"zmqueue-positions/{asked[0]}/{asked[1]}/{asked[2]}/{node}")
        lead.update(cands, {asked: (0, 0), quiet: (0, 0)}, opening={asked})  # and comes back
        wait_for(lambda: opened(2), 10, "Opened again, with the mark written again")
    finally:
        lead.stop()
        lead.join(10)
    assert not lead.is_alive()


def test_an_epoch_already_used_is_not_granted_again_after_the_lock_key_is_gone(
        consul_agent: ConsulAgent) -> None:
    """(A stream's lock key deleted by hand, or recreated by a KV import, starts
    its LockIndex at 1 again: the new writer's epoch was below what its
    replicas had seen, they refused every frame, and the stream took no
    writes for good.) The candidate takes the lock again until its epoch
    passes the newest one it knows of."""
    node = f"lead-{uuid.uuid4().hex[:8]}"
    stream, empty = (f"q-{node}", 0, node), (f"q-{node}", 1, node)
    events: queue.Queue[Event] = queue.Queue()
    lead = Leadership((consul_agent.http_addr,), 2.0, node, [], {"node": node}, events.put)
    # its log's last record is of epoch 7; the other stream has no record, but heard term 9
    lead.update({s: Candidacy((node,), node) for s in (stream, empty)}, {stream: (7, 120), empty: (0, 0)},
                terms={empty: 9})
    lead.start()
    try:
        won: dict[tuple[str, int, str], int] = {}

        def elected() -> bool:
            while not events.empty():
                ev = events.get_nowait()
                if isinstance(ev, Elected):
                    won[ev.stream] = ev.epoch
            return len(won) == 2

        wait_for(elected, 20, "the elections")
        assert won == {stream: 8, empty: 10}
        _, item = kv_client(consul_agent.http_addr).kv.get(lock_key(stream))
        assert item["LockIndex"] == 8 and item["Session"] == lead.session
    finally:
        lead.stop()
        lead.join(10)
