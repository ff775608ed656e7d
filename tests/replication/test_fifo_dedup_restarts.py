"""A FIFO queue's dedup window survives a writer failover followed by a
restart of every host (a rolling restart), as the USER_GUIDE promises.

Found by QA (3 of 3 runs): the new writer's takeover record rolls the
stream's segment on every copy; compaction then removed the closed segment,
whose messages were all consumed, on every host; and a restarted host reads
its dedup window back from its log only. Once every host had restarted, a
send retried with a dedup id accepted seconds before was stored and
delivered again. Since the forty-fifth session a FIFO partition keeps every
segment holding a message of the last 5 minutes."""

from __future__ import annotations

from pathlib import Path

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from tests.replication.test_failover import by_node, drain_in_order, three_hosts, writer_of
from zmqueue.dataplane.storage.segment import ScannedBlock, list_segments, scan_segment
from zmqueue.localcluster import ConsulAgent, HostProcess

QUEUE = "dedup.fifo"


def _copy(h: HostProcess) -> Path:
    return h.data_dir / "queues" / QUEUE / "0" / "fifo"


def _segments(h: HostProcess) -> list[int]:
    return [base for base, _ in list_segments(_copy(h))] if _copy(h).exists() else []


def _last_seq(h: HostProcess) -> int | None:
    """The last seq of the host's copy on disk (None: none yet, or a file went meanwhile)."""
    try:
        files = list_segments(_copy(h))
        if not files:
            return None
        last = None
        for block in scan_segment(files[-1][1], files[-1][0]):
            if isinstance(block, ScannedBlock):
                last = block.header.last_seq
        return last
    except FileNotFoundError:
        return None


def _caught_up(hs: list[HostProcess]) -> bool:
    seqs = {_last_seq(h) for h in hs}
    return len(seqs) == 1 and None not in seqs


def _passing(agent: ConsulAgent, h: HostProcess) -> bool:
    return all_passing(check_statuses(agent, h.node))


def test_retried_fifo_sends_are_deduplicated_after_a_failover_and_a_rolling_restart(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    hs = three_hosts(hosts, consul_agent)
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=8) as client:
        q = client.create_queue(QUEUE, fifo=True, replication_factor=3, sync_replication=True)
        ids = {f"k{i}": q.send(f"m{i}".encode(), group_id="g", dedup_id=f"k{i}") for i in range(20)}
        assert drain_in_order(q, 20, 30) == [f"m{i}".encode() for i in range(20)]
        wait_for(lambda: _caught_up(hs), 15, "every copy holding the receives and deletes")

        # the writer stops; a new one takes over, its takeover record rolls every copy's segment
        node, epoch = wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo"), 10, "a writer")
        old = by_node(hs, node)
        old.stop()
        survivors = [h for h in hs if h is not old]
        wait_for(lambda: (w := writer_of(consul_agent, QUEUE, "fifo")) and w[0] != node and w[1] > epoch,
                 15, "a new writer")
        wait_for(lambda: all(_segments(h) and _segments(h)[-1] > 1 for h in survivors), 15,
                 "the takeover record rolling the survivors' segments")

        # a rolling restart: the old writer comes back, then each other host in turn
        hs = [hosts.restart(old), *survivors]
        for i in range(3):
            if i:
                hs[i].stop()
                hs[i] = hosts.restart(hs[i])
            h = hs[i]
            wait_for(lambda: _passing(consul_agent, h), 60, f"{h.node} passing")  # noqa: B023
            wait_for(lambda: (w := writer_of(consul_agent, QUEUE, "fifo")) and any(
                x.node == w[0] and x.alive() for x in hs), 30, "a live writer")
            wait_for(lambda: _caught_up(hs), 30, f"every copy caught up after {h.node} restarted")

        # every host has restarted, well within 5 minutes of the sends: retries are recognised
        for k in ("k0", "k5", "k19"):
            assert q.send(f"m{k[1:]}".encode(), group_id="g", dedup_id=k) == ids[k], f"{k} stored again"
        q.send(b"end", group_id="g", dedup_id="end")
        assert drain_in_order(q, 1, 30) == [b"end"], "a retried send was delivered again"
