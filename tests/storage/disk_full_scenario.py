"""The disk-full scenario shared by the tmpfs test and the RLIMIT_FSIZE child."""

from __future__ import annotations

import random
from collections.abc import Callable

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.errors import DiskFull

CONFIG = StorageConfig(ring_slots=64, arena_bytes=1 << 16, segment_bytes_max=1 << 20, fsync="always")


def _batch(rng: random.Random, tag: int) -> list[NewMessage]:
    return [NewMessage(f"{tag:08d}{i:08d}".encode(), rng.randbytes(8000)) for i in range(8)]


def run_scenario(directory: str, free_space: Callable[[], None]) -> str:
    """Fill the disk until DiskFull, check committed data, free space, write again."""
    rng = random.Random(7)
    store = PartitionStore.open(directory, CONFIG, now_ms=1)
    committed: dict[int, bytes] = {}
    error: DiskFull | None = None
    for tag in range(10_000):
        batch = _batch(rng, tag)
        try:
            seqs = store.append(batch, now_ms=1 + tag)
            store.commit()
        except DiskFull as exc:
            error = exc
            break
        committed.update({s: m.body for s, m in zip(seqs, batch, strict=True)})
    assert error is not None, "the disk never filled up"
    assert "free space" in str(error) and error.details.get("path"), str(error)
    assert store.stats(10_000)["total"] == len(committed)
    free_space()
    seqs = store.append(_batch(rng, 99_999), now_ms=20_000)
    store.commit()
    store.close()
    reopened = PartitionStore.open(directory, CONFIG, now_ms=30_000)
    bodies = drain(reopened, 30_000)
    assert reopened.recovery_report.corrupt_blocks == []
    assert all(bodies[s] == b for s, b in committed.items()), "committed data changed"
    assert set(seqs) <= set(bodies)
    reopened.close()
    return f"ok: {len(committed)} committed before {error!s}"


def drain(store: PartitionStore, now_ms: int) -> dict[int, bytes]:
    """Receive and delete everything; return seq -> body."""
    out: dict[int, bytes] = {}
    while True:
        got, _ = store.receive(1000, now_ms, 60_000)
        if not got:
            return out
        for d in got:
            assert d.seq not in out, f"seq {d.seq} delivered twice"
            out[d.seq] = d.body
            store.delete(d.seq, d.receive_count, now_ms)
        store.commit()
