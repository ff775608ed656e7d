"""Receives of many large messages: a host hands out at most
``protocol.REPLY_MESSAGE_BYTES_MAX`` (32 MiB) of messages per reply, and takes
in flight only those it hands out. Before, ``receive(max_messages=100)`` on
a queue of 1 MiB messages built a reply above the 64 MiB frame limit that
the client's socket dropped (ZMQ_MAXMSGSIZE): the receive failed again and
again while every try took the messages in flight and raised their receive
counts, so they came back only after the visibility timeout (or went to the
dead-letter queue unseen)."""

from __future__ import annotations

import threading
import time
from typing import Any

import zmqueue
from tests.conftest import QueueCluster, wait_for
from zmqueue.protocol import MAX_FRAME_BYTES, REPLY_MESSAGE_BYTES_MAX

MIB = 1 << 20
BODY_BYTES = MIB - 32  # (64 of them and their fields are more than a frame holds)
COUNT = 70  # about 70 MiB: more than a frame holds
PER_SEND = 20  # about 20 MiB per SEND, well under the frame limit
QUICK_S = 8.0  # the client's request timeout is 10 s: a dropped reply takes longer


def _body(i: int) -> bytes:
    return b"%04d" % i + bytes([i % 251]) * (BODY_BYTES - 4)


def _large_queue(qcluster: QueueCluster, base: str) -> zmqueue.Queue:
    q: zmqueue.Queue = qcluster.client.create_queue(qcluster.queue_name(base), max_message_bytes=MIB,
                                                    visibility_timeout=300)
    return q


def _send_all(q: zmqueue.Queue, count: int) -> None:
    for first in range(0, count, PER_SEND):
        q.send_batch([_body(i) for i in range(first, min(count, first + PER_SEND))])


def _check_reply(msgs: list[zmqueue.Message], receive_count: int = 1) -> None:
    assert msgs, "a receive with messages visible got none"
    assert sum(len(m.body) for m in msgs) <= REPLY_MESSAGE_BYTES_MAX < MAX_FRAME_BYTES
    assert all(m.receive_count == receive_count for m in msgs), [m.receive_count for m in msgs]
    for m in msgs:
        assert m.body == _body(int(m.body[:4]))


def test_a_receive_of_100_one_mib_messages_gets_what_fits_in_a_reply_and_leaves_the_rest_visible(
        qcluster: QueueCluster) -> None:
    q = _large_queue(qcluster, "large")
    _send_all(q, COUNT)
    wait_for(lambda: q.stats()["visible"] == COUNT, 10, "every message visible")
    start = time.monotonic()
    first = q.receive(max_messages=100, wait_time=2)
    took = time.monotonic() - start
    assert took < QUICK_S, f"the receive took {took:.1f} s"
    _check_reply(first)
    assert len(first) < COUNT
    stats = q.stats()
    assert (stats["in_flight"], stats["visible"]) == (len(first), COUNT - len(first)), stats
    # the rest, exactly once each: receives that carry the previous batch's deletes
    got = list(first)
    carried = first
    for _ in range(COUNT):
        if len(got) >= COUNT:
            break
        outcomes, more = q.delete_and_receive(carried, max_messages=100)
        assert all(o is None for o in outcomes), outcomes
        _check_reply(more)
        got += more
        carried = more
    assert sorted(int(m.body[:4]) for m in got) == list(range(COUNT))
    assert len({m.id for m in got}) == COUNT
    q.delete_batch(carried)
    stats = q.stats()
    assert (stats["visible"], stats["in_flight"]) == (0, 0), stats


def _receive_all(q: zmqueue.Queue, count: int, receive_count: int = 1) -> list[zmqueue.Message]:
    """Every message, by receives of 100 (each reply checked), none deleted."""
    got: list[zmqueue.Message] = []
    for _ in range(count):
        if len(got) >= count:
            break
        more = q.receive(max_messages=100, wait_time=2)
        _check_reply(more, receive_count)
        got += more
    assert len(got) == count and len({m.id for m in got}) == count
    return got


def test_a_parked_long_poll_woken_by_many_large_messages_gets_what_fits_in_a_reply(
        qcluster: QueueCluster) -> None:
    """All the messages become visible in the same millisecond while a long
    poll waits on the host (their visibility timeout changed to 3 s by one
    request): the parked request's reply is cut too."""
    q = _large_queue(qcluster, "parked")
    _send_all(q, COUNT)
    held = _receive_all(q, COUNT)
    assert all(o is None for o in q.change_visibility_batch(held, 3))
    result: dict[str, Any] = {}

    def poll() -> None:
        try:
            result["msgs"] = q.receive(max_messages=100, wait_time=20)
        except Exception as exc:  # (reported by the assertion below)
            result["error"] = exc

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    wait_for(lambda: q.stats()["waiters"] >= 1, 10, "the long poll parked on the host")
    assert q.stats()["in_flight"] == COUNT, "the messages became visible before the poll parked"
    t.join(25)
    assert not t.is_alive() and "error" not in result, result
    _check_reply(result["msgs"], 2)
    stats = q.stats()
    assert (stats["in_flight"], stats["visible"]) == (len(result["msgs"]), COUNT - len(result["msgs"])), stats
    rest = _receive_all(q, COUNT - len(result["msgs"]), 2)
    assert sorted(int(m.body[:4]) for m in rest + result["msgs"]) == list(range(COUNT))
