"""The columnar append path: same records on disk as the object API, and its checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.storage.batch import columns_of, message_table
from zmqueue.dataplane.storage.records import RecordType, new_table
from zmqueue.errors import InvalidParameter

CONFIG = StorageConfig(ring_slots=8, arena_bytes=4096, fsync="never")


def _reference_table(messages: list[NewMessage], seq0: int, epoch: int, now_ms: int) -> np.ndarray:
    """Field-by-field construction, as the format documents it."""
    table = new_table(len(messages))
    off = 0
    for i, m in enumerate(messages):
        row = table[i : i + 1]
        row["type"] = RecordType.MESSAGE
        row["epoch"], row["seq"], row["time_ms"] = epoch, seq0 + i, now_ms
        row["message_id"] = np.frombuffer(m.message_id, "V16")
        row["visible_at_ms"] = now_ms + m.delay_ms
        row["group_hash"] = m.group_hash
        row["body_len"], row["attr_len"], row["data_off"] = len(m.body), len(m.attributes), off
        off += len(m.body) + len(m.attributes)
    return table


def _messages(n: int, attrs: bool) -> list[NewMessage]:
    return [
        NewMessage(
            (i + 1).to_bytes(16, "little"),
            bytes([i % 256]) * (i * 7 % 50),
            b"attr%d" % i if attrs and i % 2 else b"",
            group_hash=(i % 3) << 62 | (i % 2),
            delay_ms=i * 5,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("attrs", [False, True])
def test_the_vectorised_record_table_equals_the_field_by_field_one(attrs):
    messages = _messages(300, attrs)  # larger than the cached template's first size
    got = message_table(columns_of(messages), 1000, 7, 1_700_000_000_000)
    want = _reference_table(messages, 1000, 7, 1_700_000_000_000)
    assert got.tobytes() == want.tobytes()


def test_append_batch_and_append_write_identical_segments(tmp_path: Path):
    messages = _messages(50, attrs=True)
    with PartitionStore.open(tmp_path / "a", CONFIG, now_ms=5) as a:
        assert a.append(messages, 10, epoch=3) == list(range(1, 51))
    with PartitionStore.open(tmp_path / "b", CONFIG, now_ms=5) as b:
        seqs = b.append_batch(
            [m.body for m in messages],
            10,
            3,
            message_ids=b"".join(m.message_id for m in messages),
            attributes=[m.attributes for m in messages],
            group_hashes=np.array([m.group_hash for m in messages], np.uint64),
            delay_ms=np.array([m.delay_ms for m in messages]),
        )
        assert seqs == range(1, 51)
    segs_a = sorted(p.name for p in (tmp_path / "a").glob("*.seg"))
    assert segs_a == sorted(p.name for p in (tmp_path / "b").glob("*.seg"))
    for name in segs_a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_append_batch_round_trips_through_receive_and_restart(tmp_path: Path):
    with PartitionStore.open(tmp_path, CONFIG, now_ms=0) as store:
        seqs = store.append_batch([b"x" * 100] * 20, 0, attributes=[b"a"] * 20)
        got, _ = store.receive(5, 0, 1000)
        assert [d.seq for d in got] == list(seqs[:5])
        assert all(d.body == b"x" * 100 and d.attributes == b"a" for d in got)
        assert len({d.message_id for d in got}) == 5  # random ids when none given
    with PartitionStore.open(tmp_path, CONFIG, now_ms=0) as store:
        assert store.stats(0)["total"] == 20
        received = []
        for _ in range(5):  # the ring holds 8: the rest is paged in from disk
            got, _ = store.receive(8, 0, 1000)
            received += [d.seq for d in got]
            for d in got:
                store.delete(d.seq, d.receive_count, 0)
            store.commit()
        assert received == list(seqs)


def test_append_batch_refuses_columns_of_the_wrong_length(tmp_path: Path):
    with PartitionStore.open(tmp_path, CONFIG, now_ms=0) as store:
        with pytest.raises(InvalidParameter, match="16 bytes per body"):
            store.append_batch([b"a", b"b"], 0, message_ids=b"x" * 16)
        with pytest.raises(InvalidParameter, match="attributes must have one entry per body"):
            store.append_batch([b"a", b"b"], 0, attributes=[b"x"])
        with pytest.raises(InvalidParameter, match="delay_ms must have one entry per body"):
            store.append_batch([b"a", b"b"], 0, delay_ms=np.array([1, 2, 3]))
        with pytest.raises(InvalidParameter, match="group_hashes must have one entry per body"):
            store.append_batch([b"a", b"b"], 0, group_hashes=np.array([1], np.uint64))
        assert store.append_batch([], 0) == range(0)
        assert store.last_seq == 0  # nothing was staged by the refused calls


@pytest.mark.parametrize(("epoch", "delay", "body_len", "shape"), [
    (0, 0, 100, "plain"), (7, 0, 0, "plain"), (2**40, 900_000, 5, "plain"),
    (3, 0, 7, "attrs"), (0, 250, 9, "group"), (5, [40, 9], 3, "group+attrs+delays"),
])
def test_a_single_message_is_written_as_the_columnar_path_writes_it(epoch, delay, body_len, shape):
    """Single sends (any shape: attributes, a FIFO group, per-message delays)
    take a struct-packed row in the record table and the ring; it must equal
    the first row the numpy path writes for a larger batch."""
    from zmqueue.dataplane.storage.batch import pack
    from zmqueue.dataplane.storage.ring import Ring

    ids = bytes(range(16)) + bytes(range(16, 32))
    bodies = [b"b" * body_len, b"b" * body_len]
    attrs = [b"attr", b"xy"] if "attrs" in shape else None
    groups = [2**63 + 5, 11] if "group" in shape else None
    one = pack(bodies[:1], ids[:16], attrs and attrs[:1], groups and groups[:1],
               delay[:1] if isinstance(delay, list) else delay)
    two = pack(bodies, ids, attrs, groups, delay)
    body_len += 4 if attrs else 0  # the first message's bytes in the arena: body, then attributes
    now = 1_700_000_000_123
    assert (message_table(one, 41, epoch, now).tobytes()
            == message_table(two, 41, epoch, now)[:1].tobytes())
    rings = Ring(8, 4096), Ring(8, 4096)
    for ring in rings:  # something in front, so offsets and slots are not 0
        ring.insert_packed(1, pack([b"zz"], b"\1" * 16, None, None, 0), 40, now - 5, 2)
    rings[0].insert_packed(1, one, 41, now, body_len)
    rings[1].insert_packed(2, two, 41, now, len(two.heap))
    assert rings[0].meta[:2].tobytes() == rings[1].meta[:2].tobytes()
    assert rings[0].arena[:2 + body_len].tobytes() == rings[1].arena[:2 + body_len].tobytes()
    r = rings[0]
    assert (r.n, r.top, r.live, r.live_bytes) == (2, 2 + body_len, 2, 2 + body_len)
