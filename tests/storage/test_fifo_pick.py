"""The FIFO pick (chunked scan from ``live_from``, in-flight groups from the
ring's index) against the whole-window rule it replaced, on random rings.

Pure logic on a plain :class:`Ring`: random states, deadlines and groups, a
random first chunk (so chunks end anywhere: a group delayed in one chunk must
stay stopped in the next), the in-flight index either kept or dropped (to be
rebuilt), the ring's groups kept (a superset) or dropped, ``live_from``
anywhere up to the first live slot, and the scalar scan of the first slots
on or off. Then the
in-flight index through a compaction and through a replica's records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zmqueue.dataplane.replication import decode_chunks, encode_chunks
from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig, select
from zmqueue.dataplane.storage.batch import message_table, pack
from zmqueue.dataplane.storage.ring import AVAILABLE, DELETED, IN_FLIGHT, MOVING, IntArray, Ring

NOW = 1_000


def whole_window(ring: Ring, now: int, k: int) -> IntArray:
    """The rule, over every slot: a group is skipped while any of its messages
    is IN_FLIGHT before its deadline; otherwise its receivable messages are
    taken in slot order up to its first delayed one."""
    taken: list[int] = []
    n = ring.n
    s, v, g = ring.state[:n], ring.visible_at[:n], ring.group_hash[:n]
    blocked = {int(g[i]) for i in range(n) if s[i] == IN_FLIGHT and v[i] > now}
    stopped: set[int] = set()
    for i in range(n):
        if s[i] not in (AVAILABLE, IN_FLIGHT) or int(g[i]) in blocked or int(g[i]) in stopped:
            continue
        if v[i] > now:
            stopped.add(int(g[i]))
        elif len(taken) < k:
            taken.append(i)
    return np.array(taken, np.int64)


SLOT = st.tuples(
    st.sampled_from([AVAILABLE, AVAILABLE, IN_FLIGHT, MOVING, DELETED]),
    st.sampled_from([0, NOW - 1, NOW, NOW + 1, NOW + 50]),
    st.integers(0, 5),
)


@settings(max_examples=300, deadline=None)
# group 1 delayed in the first chunk stays stopped in the next
@example(slots=[(AVAILABLE, NOW + 1, 1), (AVAILABLE, 0, 2), (AVAILABLE, 0, 1)], k=5, chunk=1,
         keep_index=True, front=0, extra_groups=None, scalar=False)
# a group in flight past the scan's end is still shut
@example(slots=[(DELETED, 0, 0), (AVAILABLE, 0, 1), (IN_FLIGHT, NOW + 5, 1)], k=5, chunk=1,
         keep_index=False, front=1, extra_groups=None, scalar=False)
# the scalar scan stops group 1 at its delayed message, takes group 2, and the array scan goes on
@example(slots=[(DELETED, 0, 0), (AVAILABLE, NOW + 1, 1), (AVAILABLE, 0, 2)] + [(AVAILABLE, 0, 1)] * 16
         + [(AVAILABLE, 0, 3)], k=3, chunk=2, keep_index=True, front=0, extra_groups=None, scalar=True)
# every group shut after the second chunk: the scan may stop, group 3 is taken first
@example(slots=[(AVAILABLE, 0, 3), (IN_FLIGHT, NOW + 5, 1), (AVAILABLE, 0, 1), (AVAILABLE, NOW + 5, 2),
                (AVAILABLE, 0, 2), (AVAILABLE, 0, 3)],
         k=5, chunk=1, keep_index=True, front=0, extra_groups=[], scalar=False)
@given(slots=st.lists(SLOT, max_size=40), k=st.integers(1, 12), chunk=st.integers(1, 8),
       keep_index=st.booleans(), front=st.integers(0, 40),
       extra_groups=st.one_of(st.none(), st.lists(st.integers(0, 7), max_size=3)), scalar=st.booleans())
def test_chunked_pick_takes_what_the_whole_window_rule_takes(
    slots: list[tuple[int, int, int]], k: int, chunk: int, keep_index: bool, front: int,
    extra_groups: list[int] | None, scalar: bool,
) -> None:
    ring = Ring(48, 64)
    n = len(slots)
    ring.n = n
    for i, (state, vis, group) in enumerate(slots):
        ring.state[i], ring.visible_at[i], ring.group_hash[i] = state, vis, group
    live = [i for i, (state, _, _) in enumerate(slots) if state in (AVAILABLE, IN_FLIGHT)]
    ring.live_from = min(front, live[0] if live else n)
    if keep_index:
        ring.inflight = {i for i, (state, _, _) in enumerate(slots) if state == IN_FLIGHT}
    if extra_groups is not None:  # the groups kept: every slot's (dead ones too) and some more
        ring.groups = {group for _, _, group in slots} | set(extra_groups)
    want = whole_window(ring, NOW, k)
    saved = select.FIFO_FIRST_CHUNK, select.FIFO_SCALAR_PICK
    select.FIFO_FIRST_CHUNK = chunk
    select.FIFO_SCALAR_PICK = select.FIFO_SCALAR_PICK if scalar else 0
    try:
        got = select.pick_fifo(ring, NOW, k)
    finally:
        select.FIFO_FIRST_CHUNK, select.FIFO_SCALAR_PICK = saved
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()
    # the front only moves over dead slots; the index (rebuilt or kept) is exact
    assert ring.live_from <= (live[0] if live else n)
    assert ring.inflight == {i for i, (state, _, _) in enumerate(slots) if state == IN_FLIGHT}
    assert ring.groups is not None and ring.groups >= {slots[i][2] for i in live}


def test_every_insert_path_adds_its_groups_to_the_ones_kept() -> None:
    ring = Ring(64, 4096)
    ring.groups = set()  # (kept, as after a FIFO pick)
    batch = pack([b"a", b"b"], None, None, [5, 6], 0)
    ring.insert_packed(2, batch, 1, NOW, len(batch.heap))  # a batch with groups: columns
    single = pack([b"c"], None, None, None, 0)
    ring.insert_packed(1, single, 3, NOW, 1)  # a plain single send (no group: 0)
    records = pack([b"d", b"e"], None, None, [7, 7], 0)
    ring.insert(message_table(records, 4, 0, NOW), records.heap)  # paging in, recovery, replicas
    ring.insert_record(6, bytes(16), NOW, NOW, 9, 1, 0, b"f", 0)  # one record
    assert ring.n == 6
    assert ring.groups == {0, 5, 6, 7, 9} == set(ring.group_hash[: ring.n].tolist())


def honest_index(ring: Ring) -> bool:
    """The in-flight index, if kept, names exactly the IN_FLIGHT slots."""
    actual = set(np.flatnonzero(ring.state[: ring.n] == IN_FLIGHT).tolist())
    return ring.inflight is None or ring.inflight == actual


def fifo_store(path: Path) -> PartitionStore:
    config = StorageConfig(ring_slots=4, arena_bytes=4096, fsync="never", fifo=True)
    return PartitionStore.open(path, config, now_ms=NOW)


def messages(groups: list[int]) -> list[NewMessage]:
    return [NewMessage(i.to_bytes(16, "big"), b"m%d" % i, group_hash=g) for i, g in enumerate(groups)]


def test_compaction_moves_in_flight_slots_and_the_index_follows(tmp_path: Path) -> None:
    store = fifo_store(tmp_path / "p")
    try:
        store.append(messages([1, 2, 3, 4, 5, 6]), NOW)  # 4 in the ring, 2 in the backlog
        store.commit()
        first, _ = store.receive(2, NOW, 30_000)  # slots 0 and 1 in flight
        store.delete(first[0].seq, first[0].receive_count, NOW)
        assert store.ring.inflight == {1}
        got, _ = store.receive(5, NOW, 30_000)  # pages in: a compaction moves slot 1 to 0
        assert int(store.ring.meta["seq"][0]) == first[1].seq, "the ring was compacted"
        assert honest_index(store.ring)
        assert [m.group_hash for m in got] == [3, 4, 5], "group 2 stays shut: its message is in flight"
        assert honest_index(store.ring)
    finally:
        store.close()


def test_a_store_applying_a_writers_records_keeps_an_honest_index(tmp_path: Path) -> None:
    writer, replica = fifo_store(tmp_path / "w"), fifo_store(tmp_path / "r")
    try:
        published = 0

        def ship() -> None:
            nonlocal published
            for table, heap in replica_chunks(writer, published):
                replica.apply_chunk(table, heap)
            published = writer.last_seq

        writer.append(messages([1, 2, 3]), NOW)
        writer.commit()
        ship()
        assert select.pick_fifo(replica.ring, NOW, 10).tolist() == [0, 1, 2]  # (the index is built)
        assert replica.ring.inflight == set()
        got, _ = writer.receive(1, NOW, 30_000)
        assert [m.group_hash for m in got] == [1]
        writer.commit()
        ship()  # the VISIBILITY record puts the replica's slot 0 in flight
        assert replica.ring.state[0] == IN_FLIGHT
        assert honest_index(replica.ring)
        assert select.pick_fifo(replica.ring, NOW, 10).tolist() == [1, 2]
        assert replica.ring.inflight == {0}
    finally:
        writer.close()
        replica.close()


def replica_chunks(writer: PartitionStore, published: int) -> list[tuple[Any, bytes]]:
    return list(decode_chunks(encode_chunks(writer.read_chunks(published + 1, 100))))
