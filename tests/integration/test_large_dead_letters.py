"""Large dead letters moved to a dead-letter queue that another host writes:
each move carries at most ``protocol.DEAD_LETTER_BATCH_BYTES_MAX`` (32 MiB) of
messages. Before, a move was cut by count only (1,000 messages): 100 dead
letters of 900 KiB went in one SEND of about 88 MiB, more than the DLQ host's
peer socket takes (ZMQ_MAXMSGSIZE, ``MAX_FRAME_BYTES``, 64 MiB); the frame
was dropped, the move timed out and was retried every second with the same
batch, and the messages never reached the DLQ."""

from __future__ import annotations

import zmqueue
from tests.conftest import QueueCluster, wait_for
from zmqueue.dataplane.storage.config import StorageConfig
from zmqueue.protocol import DEAD_LETTER_BATCH_BYTES_MAX, MAX_FRAME_BYTES

MIB = 1 << 20
BODY_BYTES = 900 * 1024
COUNT = 100  # about 88 MiB: more than a frame holds, less than a stream holds in memory
PER_SEND = 20  # about 18 MiB per SEND, well under the frame limit


def _body(i: int) -> bytes:
    return b"%04d" % i + bytes([i % 251]) * (BODY_BYTES - 4)


def _source_on_another_host(qcluster: QueueCluster, dlq: zmqueue.Queue) -> zmqueue.Queue:
    """A source queue of ``dlq`` whose partition the other host writes."""
    c = qcluster.client
    dl_host = dlq.routes.for_send(0)[0]
    for _ in range(20):
        q: zmqueue.Queue = c.create_queue(qcluster.queue_name("big-src"), max_message_bytes=MIB,
                                          max_receive_count=1, dead_letter_queue=dlq.name)
        if q.routes.for_send(0)[0] != dl_host:
            return q
    raise AssertionError("20 source queues all landed on the DLQ's host (2 hosts: placement spreads them)")


def _receipts(q: zmqueue.Queue, count: int, source: str | None = None) -> dict[str, str]:
    """Receipts of ``count`` distinct messages of ``q`` by id, received by
    receives of at most 32 MiB each (bodies checked and dropped: the test's
    memory stays bounded), none deleted."""
    got: dict[str, str] = {}

    def all_seen() -> bool:
        for m in q.receive(max_messages=100, wait_time=1, visibility_timeout=300):
            assert m.body == _body(int(m.body[:4]))
            assert m.dead_letter_source == source
            got[m.id] = m.receipt
        return len(got) >= count

    wait_for(all_seen, 30, f"{count} messages of {q.name} received", interval_s=0)
    return got


def test_large_dead_letters_all_reach_a_dlq_on_another_host_in_frames_it_takes(
        qcluster: QueueCluster) -> None:
    ring = StorageConfig()  # (all of them MOVING at once in the source stream's ring)
    assert MAX_FRAME_BYTES < COUNT * BODY_BYTES < ring.arena_bytes * ring.ring_grow_max
    assert DEAD_LETTER_BATCH_BYTES_MAX < MAX_FRAME_BYTES
    c = qcluster.client
    dlq: zmqueue.Queue = c.create_queue(qcluster.queue_name("big-dl"), max_message_bytes=MIB)
    q = _source_on_another_host(qcluster, dlq)
    sent: list[str] = []
    for first in range(0, COUNT, PER_SEND):
        sent += q.send_batch([_body(i) for i in range(first, min(COUNT, first + PER_SEND))])
    assert len(set(sent)) == COUNT
    held = _receipts(q, COUNT)  # received once each: receive count 1 = max_receive_count
    assert set(held) == set(sent)
    # visible again all at once: the next receive takes every one of them as a dead letter
    assert q.change_visibility_batch(list(held.values()), 0) == [None] * COUNT

    def all_moved() -> bool:  # (their second receive: past max_receive_count)
        assert q.receive(max_messages=1000, wait_time=0.5) == []
        return bool(dlq.stats()["total"] == COUNT)

    wait_for(all_moved, 40, f"all {COUNT} dead letters in the DLQ")
    stats = q.stats()
    assert (stats["total"], stats["dead_letters_waiting"]) == (0, 0), stats
    assert set(_receipts(dlq, COUNT, source=q.name)) == set(sent)
    assert dlq.stats()["total"] == COUNT  # none twice (a move retried after it was stored)
