"""Consumed messages leave the disk of every copy of a stream, also when the
stream goes idle: its writer rolls the old active segment with a record of
its own (a block with an EPOCH record starts a new segment on every copy) and
compaction removes the rest. Before the thirty-seventh session a stream
that had written less than a segment (64 MiB) kept every body it had
stored, consumed or not, in its active segment for good.

A FIFO stream's closed segment stays while it holds a message of the last 5
minutes (its dedup ids are read back from it after a restart): until the
forty-fifth session this test expected the FIFO copies down to the roll's
record within seconds, which is what lost the dedup window
(test_fifo_dedup_restarts.py); the idle roll itself is checked on the FIFO
stream, and the removal on a standard queue."""

from __future__ import annotations

from pathlib import Path

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from tests.replication.test_failover import by_node, drain, drain_in_order, writer_of
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


def _messages(h: HostProcess, directory: Path | None = None) -> int:
    return sum(t.count(RecordType.MESSAGE) for t in _record_types(directory or _copy(h)) or [])


def _rolled(hs: list[HostProcess]) -> bool:
    """Every copy's active segment holds no message, only the roll's own
    record, and its closed one the 20 consumed messages (FIFO: kept for the
    dedup window)."""
    return all((types := _record_types(_copy(h))) and types[-1] == [RecordType.EPOCH]
               and _messages(h) == 20 for h in hs)


def _standard_messages(hs: list[HostProcess], queue: str) -> int:
    """MESSAGE records in every copy of every stream of ``queue`` on ``hs``."""
    return sum(_messages(h, d) for h in hs
               for d in (h.data_dir / "queues" / queue / "0").glob("*") if d.is_dir())


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
        wait_for(lambda: _rolled(hs), 30, "every copy's consumed segment closed by the roll's own record")

        # a standard queue's consumed messages leave every copy's disk at once (no dedup window)
        std = client.create_queue("roll-std", replication_factor=3, sync_replication=True)
        std.send_batch([f"plain {i}".encode() for i in range(20)])
        wait_for(lambda: _standard_messages(hs, "roll-std") == 60, 10, "every copy holding the messages")
        assert len(drain(std, 20, 30)) == 20
        wait_for(lambda: _standard_messages(hs, "roll-std") == 0, 30, "every copy without the messages")

        # the stream goes on where it was, on a new writer too
        node, _ = wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo"), 10, "a writer")
        for i in range(3):
            q.send(f"after {i}".encode(), group_id="g", dedup_id=f"a{i}")
        by_node(hs, node).kill9()
        wait_for(lambda: (w := writer_of(consul_agent, QUEUE, "fifo")) and w[0] != node, 15, "a new writer")
        assert drain_in_order(q, 3, 30) == [f"after {i}".encode() for i in range(3)]
