"""Consumed messages leave the disk of every copy of a stream, also when the
stream goes idle: its writer rolls the old active segment with a record of
its own (a block with an EPOCH record starts a new segment on every copy) and
compaction removes the rest. Before the thirty-seventh session a stream
that had written less than a segment (64 MiB) kept every body it had
stored, consumed or not, in its active segment for good."""

from __future__ import annotations

from pathlib import Path

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from tests.replication.test_failover import by_node, drain_in_order, writer_of
from zmqueue.dataplane.storage.records import RecordType
from zmqueue.dataplane.storage.segment import ScannedBlock, list_segments, scan_segment
from zmqueue.localcluster import ConsulAgent, HostProcess

QUEUE = "roll.fifo"


def _copy(h: HostProcess) -> Path:
    return h.data_dir / "queues" / QUEUE / "0" / "fifo"


def _record_types(directory: Path) -> list[list[int]] | None:
    """Each segment's record types (None while a file is being replaced)."""
    out = []
    try:
        for base, path in list_segments(directory):
            types: list[int] = []
            for block in scan_segment(path, base):
                assert isinstance(block, ScannedBlock), block
                types += [int(t) for t in block.table["type"]]
            out.append(types)
    except FileNotFoundError:
        return None
    return out


def _messages(h: HostProcess) -> int:
    return sum(t.count(RecordType.MESSAGE) for t in _record_types(_copy(h)) or [])


def _rolled(hs: list[HostProcess]) -> bool:
    """Every copy holds one segment, of no message (the roll's own record)."""
    return all(_record_types(_copy(h)) == [[RecordType.EPOCH]] for h in hs)


def test_an_idle_stream_s_consumed_messages_leave_every_copy_s_disk(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    hs = [hosts.start(f"h{i}", extra_args=["--segment-roll-ms", "1000"]) for i in (1, 2, 3)]
    for h in hs:
        node = h.node
        wait_for(lambda: all_passing(check_statuses(consul_agent, node)), 60, f"{node} passing")  # noqa: B023
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=8) as client:
        q = client.create_queue(QUEUE, fifo=True, replication_factor=3, sync_replication=True)
        for i in range(20):
            q.send(f"secret {i}".encode(), group_id="g", dedup_id=f"d{i}")
        wait_for(lambda: all(_messages(h) == 20 for h in hs), 10, "every copy holding the messages")
        assert drain_in_order(q, 20, 30) == [f"secret {i}".encode() for i in range(20)]
        wait_for(lambda: _rolled(hs), 30, "every copy down to the roll's own record")

        # the stream goes on where it was, on a new writer too
        node, _ = wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo"), 10, "a writer")
        for i in range(3):
            q.send(f"after {i}".encode(), group_id="g", dedup_id=f"a{i}")
        by_node(hs, node).kill9()
        wait_for(lambda: (w := writer_of(consul_agent, QUEUE, "fifo")) and w[0] != node, 15, "a new writer")
        assert drain_in_order(q, 3, 30) == [f"after {i}".encode() for i in range(3)]
