"""A writer whose Consul session became invalid (a restarted agent, a
destroyed session) campaigns again with a new session at once, instead of
retrying the dead one until its renewal is due. Real Consul, the real
leadership thread, in process."""

from __future__ import annotations

import logging
import queue
import uuid

import pytest

from tests.conftest import wait_for
from tests.controlplane_integration.conftest import kv_client
from zmqueue.controlplane import leadership
from zmqueue.controlplane.leadership import Candidacy, Deposed, Elected, Event, Leadership
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
