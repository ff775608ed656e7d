"""When ``QueueService.h_send`` looks a SEND up among the sends this host
holds as a replica (pure: the handler on a fake service, a real
``ReplicatedSends`` index): a retry marked ``rt`` at a host of a partition
with one replica whose index holds nothing of it yet."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.unit.test_resends import table_of
from zmqueue.config import QueueConfig
from zmqueue.dataplane.dispatch import DEFERRED
from zmqueue.dataplane.resends import TAG_BYTES, ReplicatedSends, request_tag, tagged_ids
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.topology import Metadata, PartitionInfo
from zmqueue.protocol import RETRY_MARK, hex_ids

RID, FINGERPRINT, NOW = 7, 1234, 1_000_000


class FakeStream:
    def __init__(self) -> None:
        self.stored: list[tuple[list[Any], bytes | None]] = []

    def send_bodies(self, items: list[Any], now: int, tag: bytes | None) -> bytes:
        self.stored.append((items, tag))
        return tagged_ids(tag, len(items)) if tag else b"\x00" * 16 * len(items)

    def send(self, items: list[Any], now: int, tag: bytes | None) -> list[str]:
        return hex_ids(self.send_bodies(items, now, tag))


def service(queued: bytes = b"") -> Any:
    """A host of ``q`` partition 0 with one replica (R was lowered: the other
    hosts' streams are no longer replicated to it), its index empty; ``queued``:
    the ids of the failed host's last records, still queued on its SUB socket
    (``take_pending`` applies them)."""
    resends = ReplicatedSends()
    pending = [queued] if queued else []

    def take_pending(now: int) -> None:
        svc.took += 1
        while pending:
            resends.note_later("q", 0, table_of(41, pending.pop()), now, origin="h2")

    def answer(req: Any, key: Any, result: Any) -> Any:
        svc.answered.append((key, result))
        return DEFERRED

    stream = FakeStream()
    svc = SimpleNamespace(
        node="h1", took=0, answered=[], stream=stream,
        meta=Metadata(configs={"q": QueueConfig(name="q")}, partitions={("q", 0): PartitionInfo(("h1",))}),
        replicator=SimpleNamespace(resends=resends, take_pending=take_pending,
                                   counters={"sends_found_replicated": 0}),
        handover=SimpleNamespace(hold=lambda req, keys, now: False),
        _part=lambda req, body, now: ("q", 0), _answer_when_opened=answer,
        writer_stream=lambda *key: stream, in_reach=lambda st, what: None,
        after_commit=lambda st, req, result: result)
    return svc


def request() -> Any:
    return SimpleNamespace(user="", frame=SimpleNamespace(request_id=RID), fingerprint=FINGERPRINT)


def test_a_marked_retry_at_a_lone_replica_with_nothing_noted_applies_the_queued_records_and_is_answered(
        ) -> None:
    """(The lookup ran only with R > 1 or a request of the partition noted:
    just after R was lowered to 1, the failed host's records still queued
    unapplied, the retry was stored a second time.)"""
    tag = request_tag("", RID, FINGERPRINT)
    first = tagged_ids(tag, 2)
    svc = service(queued=first)
    assert not svc.replicator.resends.holds("q", 0, NOW)
    reply = QueueService.h_send(svc, request(), {"q": "q", "b": [b"a", b"b"], RETRY_MARK: True}, NOW)
    assert reply is DEFERRED and svc.took == 1
    assert svc.answered == [(("q", 0, "h2"), {"ib": first})]
    assert svc.stream.stored == [], "not stored again"
    assert svc.replicator.counters["sends_found_replicated"] == 1
    # the same with messages (m): answered with the ids as hex
    svc = service(queued=first)
    QueueService.h_send(svc, request(), {"q": "q", "m": [{"b": b"a"}, {"b": b"b"}], RETRY_MARK: True}, NOW)
    assert svc.answered == [(("q", 0, "h2"), {"ids": hex_ids(first)})] and svc.stream.stored == []


def test_a_marked_retry_found_nowhere_is_stored_once_under_its_tag_and_a_first_try_hashes_none() -> None:
    tag = request_tag("", RID, FINGERPRINT)
    svc = service()
    reply = QueueService.h_send(svc, request(), {"q": "q", "b": [b"a"], RETRY_MARK: True}, NOW)
    assert svc.took == 1 and svc.answered == []
    assert svc.stream.stored == [([b"a"], tag)] and reply["ib"][:TAG_BYTES] == tag
    svc = service()
    reply = QueueService.h_send(svc, request(), {"q": "q", "m": [{"b": b"a"}], RETRY_MARK: True}, NOW)
    assert svc.stream.stored == [([{"b": b"a"}], tag)] and bytes.fromhex(reply["ids"][0])[:TAG_BYTES] == tag
    # a first try (not marked) at R=1 with nothing noted: no tag, no lookup
    svc = service(queued=tagged_ids(tag, 1))
    reply = QueueService.h_send(svc, request(), {"q": "q", "b": [b"a"]}, NOW)
    assert svc.took == 0 and svc.answered == [] and svc.stream.stored == [([b"a"], None)]
