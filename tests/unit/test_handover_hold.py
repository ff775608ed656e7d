"""Which sends and receives a host holds while a stream's writer settles
(``Handover.hold``), rather than bouncing them with NOT_LEADER.

The case that flapped in CI: a new standard queue's writer locks are taken
one by one, and other hosts list a host as its own stream's writer a moment
before its request loop hears of the election. A request that went to that
listed writer must wait for the election, not be redirected to another
host's stream."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

from zmqueue.config import QueueConfig
from zmqueue.dataplane.dispatch import Request
from zmqueue.dataplane.handover import WRITER_WAIT_MS, Handover
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo

if TYPE_CHECKING:
    from collections.abc import Iterator

NOW = 1_000_000


class Svc:
    """What ``Handover.hold`` reads of a QueueService: plain values."""

    redirect_to = QueueService.redirect_to

    def __init__(self, node: str, streams: StreamSet, meta: Metadata) -> None:
        self.node, self.set, self.meta = node, streams, meta


def meta(fifo: bool, writers: dict[str, str]) -> Metadata:
    name = "q.fifo" if fifo else "q"
    return Metadata(configs={name: QueueConfig(name=name, fifo=fifo)},
                    partitions={(name, 0): PartitionInfo(("h1", "h2", "h3"), writers)})


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[StreamSet]:
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    yield ss
    ss.close()


def held(streams: StreamSet, key: tuple[str, int, str], writers: dict[str, str],
         now: int = NOW, req: Any = None) -> bool:
    m = meta(key[2] == "fifo", writers)
    streams.reconcile(m, NOW)
    assert streams.streams[key].role is Role.REPLICA
    handover = Handover(cast(QueueService, Svc("h1", streams, m)))
    return handover.hold(cast(Request, req if req is not None else SimpleNamespace()), [key], now)


OWN = ("q", 0, "h1")


def test_own_stream_is_held_while_its_election_has_not_reached_the_loop(streams: StreamSet) -> None:
    # another host already writes its own stream, h1's lock not taken yet or
    # taken and listed (other hosts route to h1) but not yet heard of here
    assert held(streams, OWN, {"h2": "h2"})
    assert held(streams, OWN, {"h1": "h1", "h2": "h2", "h3": "h3"})
    assert held(streams, OWN, {})


def test_own_stream_written_by_another_host_is_redirected_not_held(streams: StreamSet) -> None:
    # h2 took h1's stream (h1 was down): sends go to a host writing its own stream
    assert not held(streams, OWN, {"h1": "h2", "h2": "h2"})


def test_another_hosts_stream_is_held_only_while_no_host_takes_it(streams: StreamSet) -> None:
    other = ("q", 0, "h2")
    assert not held(streams, other, {"h2": "h2"})
    assert not held(streams, other, {"h3": "h3"})  # h3 takes the sends meanwhile
    assert held(streams, other, {})  # no writer anywhere yet: an election in progress


def test_fifo_stream_is_held_until_a_writer_elsewhere_is_known(streams: StreamSet) -> None:
    fifo = ("q.fifo", 0, "fifo")
    assert held(streams, fifo, {})
    assert held(streams, fifo, {"fifo": "h1"})  # listed here, election not heard of yet
    assert not held(streams, fifo, {"fifo": "h2"})  # redirected to h2


def test_a_request_is_held_for_at_most_writer_wait(streams: StreamSet) -> None:
    req = SimpleNamespace()
    assert held(streams, OWN, {"h2": "h2"}, NOW, req)
    assert held(streams, OWN, {"h2": "h2"}, NOW + WRITER_WAIT_MS - 1, req)
    assert not held(streams, OWN, {"h2": "h2"}, NOW + WRITER_WAIT_MS, req)
