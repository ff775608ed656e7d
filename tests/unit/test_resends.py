"""ReplicatedSends: the ids a replica applied, found again by the request that
stored them (pure logic on record tables)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zmqueue.dataplane.resends import ReplicatedSends, request_tag, tagged_ids
from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.storage.records import RecordType, Table, new_table
from zmqueue.protocol import hex_ids


def table_of(first_seq: int, ids: bytes, types: list[RecordType] | None = None) -> Table:
    n = len(ids) // 16
    t = new_table(n)
    t["seq"] = np.arange(first_seq, first_seq + n)
    t["type"] = [int(x) for x in types] if types else int(RecordType.MESSAGE)
    t["message_id"] = np.frombuffer(ids, "V16")
    return t


def hexes(ids: bytes) -> list[str]:
    return [ids[i:i + 16].hex() for i in range(0, len(ids), 16)]


def test_tags_differ_by_request_and_by_client_and_ids_carry_them() -> None:
    assert request_tag("", 7) == request_tag("", 7)
    assert len({request_tag("", 7), request_tag("", 8), request_tag("alice", 7)}) == 3
    tag = request_tag("", 7)
    for n in (1, 3, 100):
        ids = tagged_ids(tag, n)
        assert len(ids) == 16 * n
        assert all(ids[i:i + 8] == tag for i in range(0, len(ids), 16))
        assert len(set(hexes(ids))) == n
        assert hex_ids(ids) == hexes(ids), "the hex texts a SEND's ids reply carries"


def test_each_request_of_a_block_is_found_with_its_own_ids_and_only_at_its_partition() -> None:
    index = ReplicatedSends()
    a, b, c = (tagged_ids(request_tag("", r), n) for r, n in ((1, 3), (2, 1), (3, 2)))
    index.note("q", 0, table_of(10, a + b + c), now_ms=1000)
    assert index.get("q", 0, request_tag("", 1), 3, 1000) == a
    assert index.get("q", 0, request_tag("", 2), 1, 1000) == b
    assert index.get("q", 0, request_tag("", 3), 2, 1000) == c
    assert index.get("q", 1, request_tag("", 1), 3, 1000) is None
    assert index.get("other", 0, request_tag("", 1), 3, 1000) is None
    assert index.get("q", 0, request_tag("", 4), 1, 1000) is None


def test_only_message_records_count_and_a_request_split_over_chunks_is_joined() -> None:
    index = ReplicatedSends()
    ids = tagged_ids(request_tag("", 5), 4)
    index.note("q", 0, table_of(1, ids[:32]), now_ms=0)
    assert index.get("q", 0, request_tag("", 5), 4, 0) is None, "half of the request is not enough"
    index.note("q", 0, table_of(3, ids[32:]), now_ms=0)
    assert index.get("q", 0, request_tag("", 5), 4, 0) == ids
    other = tagged_ids(request_tag("", 6), 1)
    index.note("q", 0, table_of(5, other + other, [RecordType.MESSAGE, RecordType.DELETE]), now_ms=0)
    assert index.get("q", 0, request_tag("", 6), 1, 0) == other
    single = tagged_ids(request_tag("", 9), 1)
    index.note("q", 0, table_of(7, single, [RecordType.DELETE]), now_ms=0)
    assert index.get("q", 0, request_tag("", 9), 1, 0) is None


def test_entries_expire_and_the_index_is_bounded_by_ids() -> None:
    index = ReplicatedSends(max_ids=10, ttl_ms=100)
    first = tagged_ids(request_tag("", 1), 6)
    index.note("q", 0, table_of(1, first), now_ms=0)
    assert index.get("q", 0, request_tag("", 1), 6, 101) is None, "older than the TTL"
    index.note("q", 0, table_of(7, tagged_ids(request_tag("", 2), 6)), now_ms=50)
    assert index.get("q", 0, request_tag("", 1), 6, 50) is None, "dropped: 12 ids > 10"
    assert index.get("q", 0, request_tag("", 2), 6, 50) is not None
    assert len(index) == 1
    few = ReplicatedSends(max_entries=2)
    for r in range(3):
        few.note("q", 0, table_of(r + 1, tagged_ids(request_tag("", r), 1)), now_ms=0)
    assert len(few) == 2 and few.get("q", 0, request_tag("", 0), 1, 0) is None, "the oldest went first"


def test_a_stream_reopened_from_disk_answers_for_its_recent_sends_only(tmp_path: Path) -> None:
    """A host restarted soon after it died: its streams' sends of the last
    TTL are noted again from the log (a real store on disk)."""
    now = 10_000_000
    old, recent = (tagged_ids(request_tag("", r), 3) for r in (1, 2))
    with PartitionStore.open(tmp_path / "s", StorageConfig(fsync="always"), now_ms=now) as store:
        store.append_batch([b"a", b"b", b"c"], now - 3 * 60 * 1000, message_ids=old)
        store.append_batch([b"d", b"e", b"f"], now - 1000, message_ids=recent)
        store.commit()
    with PartitionStore.open(tmp_path / "s", StorageConfig(fsync="always"), now_ms=now) as store:
        index = ReplicatedSends(ttl_ms=2 * 60 * 1000)
        index.note_recent("q", 0, store, now)
    assert index.get("q", 0, request_tag("", 2), 3, now) == recent
    assert index.get("q", 0, request_tag("", 1), 3, now) is None, "older than the TTL"


def test_chunks_noted_later_count_from_the_next_pass_or_the_next_lookup() -> None:
    """A replica notes applied chunks after its pass's acks (note_later); a
    lookup in the same pass, or the pass's end, notes them first."""
    index = ReplicatedSends()
    a, b = tagged_ids(request_tag("", 1), 2), tagged_ids(request_tag("", 2), 1)
    index.note_later("q", 0, table_of(1, a), now_ms=0)
    index.note_later("q", 0, table_of(3, b), now_ms=0)
    assert len(index) == 0, "nothing noted before the pass ends"
    assert index.get("q", 0, request_tag("", 2), 1, 0) == b, "a lookup notes what waits"
    assert len(index) == 2
    c = tagged_ids(request_tag("", 3), 1)
    index.note_later("q", 0, table_of(4, c), now_ms=0)
    index.note_deferred()
    assert len(index) == 3 and index.get("q", 0, request_tag("", 3), 1, 0) == c


def test_a_resync_forgets_the_requests_it_cut_from_that_stream_only() -> None:
    """A copy cut back after seq 5 (a resync) no longer holds the requests past
    it: a retry of one answered with their ids would be confirmed and stored
    nowhere, so it is stored again instead."""
    index = ReplicatedSends()
    kept, cut, spanning, elsewhere = (tagged_ids(request_tag("", r), n) for r, n in
                                      ((1, 3), (2, 2), (3, 2), (4, 2)))
    index.note("q", 0, table_of(1, kept), now_ms=0, origin="a")  # seqs 1-3
    index.note_later("q", 0, table_of(4, spanning + cut), now_ms=0, origin="a")  # 4-5, 6-7
    index.note("q", 0, table_of(6, elsewhere), now_ms=0, origin="b")  # another stream's 6-7
    assert index.forget("q", 0, "a", after_seq=4) == 2
    assert index.get("q", 0, request_tag("", 1), 3, 0) == kept
    assert index.get("q", 0, request_tag("", 2), 2, 0) is None
    assert index.get("q", 0, request_tag("", 3), 2, 0) is None, "half of it was cut"
    assert index.get("q", 0, request_tag("", 4), 2, 0) == elsewhere
    assert index.forget("q", 1, "a", after_seq=0) == 0 and index.forget("q", 0, "a", 0) == 1


def test_holds_says_whether_a_partition_has_a_request_noted_within_the_ttl() -> None:
    """What a host of a partition with one replica asks before it hashes a
    SEND's tag: true while a request of that partition is noted (or waits to
    be) within the TTL, false once they expired, were evicted or forgotten."""
    index = ReplicatedSends(max_entries=2, ttl_ms=100)
    assert not index.holds("q", 0, 0), "nothing noted: R=1 from the start"
    index.note_later("q", 0, table_of(1, tagged_ids(request_tag("", 1), 2)), now_ms=0)
    assert index.holds("q", 0, 0), "a chunk applied in this pass, not noted yet"
    assert not index.holds("q", 1, 0) and not index.holds("other", 0, 0)
    index.note_deferred()
    assert index.holds("q", 0, 100) and not index.holds("q", 0, 101), "the TTL"
    index.note("q", 0, table_of(3, tagged_ids(request_tag("", 2), 1)), now_ms=50)
    assert index.holds("q", 0, 150), "the partition's last request noted counts"
    index.note("q", 1, table_of(1, tagged_ids(request_tag("", 3), 1)), now_ms=60)
    index.note("q", 1, table_of(2, tagged_ids(request_tag("", 4), 1)), now_ms=60)
    assert len(index) == 2 and not index.holds("q", 0, 60), "partition 0's requests were evicted"
    assert index.forget("q", 1, "", after_seq=1) == 1 and index.holds("q", 1, 60)
    assert index.forget("q", 1, "", after_seq=0) == 1 and not index.holds("q", 1, 60), "forgotten"
    again = tagged_ids(request_tag("", 5), 2)
    index.note("q", 2, table_of(1, again[:16]), now_ms=70)
    index.note("q", 2, table_of(2, again[16:]), now_ms=80)  # (one request, in two pieces)
    assert index.forget("q", 2, "", after_seq=0) == 1 and not index.holds("q", 2, 80)
