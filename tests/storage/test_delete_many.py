"""delete_many (a consumer's batch of receipts) against deleting one by one, on twin stores."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.errors import InvalidReceipt

NOW = 1_000


def _twins(tmp: Path, n: int) -> tuple[PartitionStore, PartitionStore, dict[int, int]]:
    """Two stores with the same ``n`` messages, all received once: {seq: receive count}."""
    stores = []
    for name in ("batch", "single"):
        s = PartitionStore.open(tmp / name, StorageConfig(ring_slots=64, arena_bytes=1 << 16), now_ms=NOW)
        s.append_batch([b"m%d" % i for i in range(n)], NOW)
        s.commit()
        got, _ = s.receive(n, NOW, 30_000)
        assert len(got) == n
        stores.append(s)
    flying = {d.seq: d.receive_count for d in got}
    return stores[0], stores[1], flying


def _outcome(err: InvalidReceipt | None) -> tuple[str, bool] | None:
    return None if err is None else (str(err), bool(err.details.get("gone")))


def _one_by_one(store: PartitionStore, receipts: list[tuple[int, int]]) -> list[tuple[str, bool] | None]:
    """The outcomes of deleting ``receipts`` one at a time, in order."""
    want: list[tuple[str, bool] | None] = []
    for seq, count in receipts:
        try:
            store.delete(seq, count, NOW)
            want.append(None)
        except InvalidReceipt as exc:
            want.append(_outcome(exc))
    return want


@settings(max_examples=120, deadline=None)
@given(n=st.integers(4, 40), data=st.data())
def test_a_batch_of_receipts_does_what_deleting_them_one_by_one_does(n: int, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d:
        batch, single, flying = _twins(Path(d), n)
        seqs = sorted(flying)
        picks = data.draw(st.lists(st.sampled_from(seqs), min_size=1, max_size=n))
        receipts = [(s, flying[s] + data.draw(st.sampled_from([0, 0, 0, 1]))) for s in picks]
        receipts += [(s, 1) for s in data.draw(st.lists(st.integers(seqs[-1] + 1, seqs[-1] + 50),
                                                        max_size=3))]  # never written
        receipts = data.draw(st.permutations(receipts))

        got = [_outcome(e) for e in batch.delete_many(receipts, NOW)]
        assert got == _one_by_one(single, receipts)
        for s in (batch, single):
            s.commit()
        # the same messages are left, and they stay so across a restart (the
        # DELETE records were logged)
        left = [sorted(d.seq for d in s.receive(n, NOW + 60_000, 1_000)[0]) for s in (batch, single)]
        assert left[0] == left[1]
        for s in (batch, single):
            s.close()
        again = PartitionStore.open(Path(d) / "batch", StorageConfig(ring_slots=64, arena_bytes=1 << 16),
                                    now_ms=NOW + 120_000)
        try:
            assert sorted(x.seq for x in again.receive(n, NOW + 120_000, 1_000)[0]) == left[0]
        finally:
            again.close()


def test_the_array_path_deletes_a_consumers_batch_and_refuses_the_stale_ones() -> None:
    with tempfile.TemporaryDirectory() as d:
        store, _, flying = _twins(Path(d), 10)
        seqs = sorted(flying)
        receipts = [(s, flying[s]) for s in seqs[:6]] + [(seqs[6], flying[seqs[6]] + 1), (seqs[-1] + 5, 1)]
        out = store.delete_many(receipts, NOW)
        assert out[:6] == [None] * 6
        assert isinstance(out[6], InvalidReceipt) and not out[6].details.get("gone")
        assert isinstance(out[7], InvalidReceipt) and out[7].details.get("gone") is True
        assert store.ring.live == 4


@settings(max_examples=120, deadline=None)
@given(n=st.integers(4, 40), data=st.data())
def test_a_run_of_consecutive_seqs_does_what_deleting_them_one_by_one_does(n: int,
                                                                          data: st.DataObject) -> None:
    """The run path (a consumer's batch of consecutive messages, in order or
    not; some perhaps stale or deleted already) against deleting one by one."""
    with tempfile.TemporaryDirectory() as d:
        batch, single, flying = _twins(Path(d), n)
        seqs = sorted(flying)
        for s in data.draw(st.lists(st.sampled_from(seqs), max_size=2, unique=True)):
            for store in (batch, single):  # deleted before the batch comes
                store.delete(s, flying[s], NOW)
        a = data.draw(st.integers(0, n - 4))
        b = data.draw(st.integers(a + 4, n))
        run = seqs[a:b]
        if data.draw(st.booleans()):
            run = data.draw(st.permutations(run))
        stale = data.draw(st.sampled_from([None, None, *run]))
        shift = data.draw(st.sampled_from([0, 0, 0, 1]))  # 1: every receipt of the run stale alike
        counts = [flying[s] + shift + (1 if s == stale else 0) for s in run]
        got = [_outcome(e) for e in batch.delete_columns(run, counts, NOW)]
        assert got == _one_by_one(single, list(zip(run, counts, strict=True)))
        left = [sorted(m.seq for m in st_.receive(n, NOW + 60_000, 1_000)[0]) for st_ in (batch, single)]
        assert left[0] == left[1]
        for st_ in (batch, single):
            st_.close()


def test_a_run_with_the_same_count_everywhere_refuses_the_slots_received_since() -> None:
    """The run path's uniform-count check (one comparison with a scalar)
    against a ring whose counts differ: the messages received again since
    are refused as stale, the others deleted."""
    with tempfile.TemporaryDirectory() as d:
        store = PartitionStore.open(Path(d) / "p", StorageConfig(ring_slots=64, arena_bytes=1 << 16),
                                    now_ms=NOW)
        seqs = list(store.append_batch([b"m%d" % i for i in range(10)], NOW))
        assert len(store.receive(10, NOW, 30_000)[0]) == 10
        for s in seqs[3:5]:
            store.change_visibility(s, 1, 0, NOW)  # visible again at once ...
        assert [m.seq for m in store.receive(10, NOW, 30_000)[0]] == seqs[3:5]  # ... received twice
        out = store.delete_columns(seqs, [1] * 10, NOW)
        assert [type(e) for e in out] == [type(None)] * 3 + [InvalidReceipt] * 2 + [type(None)] * 5
        assert all("received again since (2 receives in all)" in str(e) for e in out[3:5])
        assert store.ring.live == 2
        assert store.delete_columns(seqs[3:5], [2, 2], NOW) == [None, None]
        assert store.ring.live == 0
        store.close()
