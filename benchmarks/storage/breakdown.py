"""Where the time of one append_batch + commit goes, beside the bare loop's pieces.

Run: ``python -m benchmarks.storage.breakdown [--rounds 7]``.  Each piece runs
alone in a tight loop on the benchmark's batches (100 x 100-byte bodies);
times are **thread CPU time** (``time.thread_time``), so other processes on a
shared machine inflate them less than wall-clock time; medians of ``--rounds``
rounds, µs per batch of 100 messages.  ``append_batch`` is measured on the
backlog path (ring full: most of the benchmark's batches) and on the ring path
(a warm ring: its arena pages already touched).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import crc32c
import lz4.block
import numpy as np

from benchmarks.storage.bench_storage import _batches, _mixed
from zmqueue.dataplane.storage import PartitionStore, StorageConfig, batch
from zmqueue.dataplane.storage.records import HEADER, MAGIC, encode_payload

CALLS = 2000


def _time(fn: Callable[[int], object], rounds: int, setup: Callable[[], object] | None = None) -> float:
    """Median over rounds of the thread CPU time of ``fn(i)``, µs per call."""
    for i in range(200):
        fn(i)
    out = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        start = time.thread_time()
        for i in range(CALLS):
            fn(i)
        out.append((time.thread_time() - start) / CALLS * 1e6)
    return statistics.median(out)


def in_loop(batches: list[tuple[list[bytes], bytes]], rounds: int) -> str:
    """The benchmark's loop itself (a fresh store per round, 3,000 batches):
    thread CPU time of each append_batch (by path) and each commit()."""
    times: dict[str, list[int]] = {}
    totals = []
    for _ in range(rounds):
        d = Path(tempfile.mkdtemp(prefix="zmq-breakdown-"))
        store = PartitionStore.open(d, StorageConfig(fsync="interval"), now_ms=0)
        start = time.thread_time_ns()
        for i in range(3000):
            bodies, ids = batches[i % 50]
            path = "append_batch, ring path" if store.backlog.cursor is None else "append_batch, backlog path"
            t0 = time.thread_time_ns()
            store.append_batch(bodies, 0, message_ids=ids)
            t1 = time.thread_time_ns()
            store.commit()
            t2 = time.thread_time_ns()
            times.setdefault(path, []).append(t1 - t0)
            times.setdefault("commit", []).append(t2 - t1)
        totals.append((time.thread_time_ns() - start) / 3000)
        store.close()
        shutil.rmtree(d)
    n = sum(len(v) for k, v in times.items() if k != "commit")
    out = "| in the loop (fresh store per round) | calls | median µs | mean µs | µs per batch |\n"
    out += "|---|---:|---:|---:|---:|\n"
    for name, ns in times.items():
        mean = statistics.mean(ns) / 1000
        share = mean * len(ns) / n
        out += f"| {name} | {len(ns):,} | {statistics.median(ns) / 1000:.2f} | {mean:.2f} | {share:.2f} |\n"
    out += f"| **whole loop body** | {n:,} | | | **{statistics.median(totals) / 1000:.2f}** |\n"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    batches = _batches(50)
    mixed = _mixed(batches)
    tmp = Path(tempfile.mkdtemp(prefix="zmq-breakdown-"))
    rows: list[tuple[str, float]] = []
    try:
        store = PartitionStore.open(tmp / "s", StorageConfig(fsync="interval"), now_ms=0)

        def reset() -> None:
            store.staged.n, store.staged.heaps, store.staged.heap_len = 0, [], 0

        def append(i: int) -> None:
            bodies, ids = batches[i % 50]
            store.append_batch(bodies, 0, message_ids=ids)
            reset()

        def append_mixed(i: int) -> None:
            bodies, ids = mixed[i % 50]
            store.append_batch(bodies, 0, message_ids=ids)
            reset()

        def pack(i: int) -> None:
            bodies, ids = batches[i % 50]
            batch.pack(bodies, ids, None, None, 0)

        packed = [batch.pack(b, ids, None, None, 0) for b, ids in batches]

        def stage(i: int) -> None:
            store.staged.stage_packed(packed[i % 50], 1, 0, 0)
            reset()

        ring_store = PartitionStore.open(tmp / "r", StorageConfig(fsync="never"), now_ms=0)
        ring_store.ring.arena[:] = 0  # touch the arena: a warm ring, as in a long-lived store

        def append_ring(i: int) -> None:
            if ring_store.ring.n + 100 > ring_store.ring.slots:
                ring_store.ring.clear()
            bodies, ids = batches[i % 50]
            ring_store.append_batch(bodies, 0, message_ids=ids)
            ring_store.staged.n, ring_store.staged.heaps, ring_store.staged.heap_len = 0, [], 0

        rows.append(("pack (lengths, uniform check, join)", _time(pack, rounds)))
        rows.append(("stage_packed (MESSAGE rows in place)", _time(stage, rounds)))
        for _ in range(700):  # fill the ring: the backlog path
            bodies, ids = batches[0]
            store.append_batch(bodies, 0, message_ids=ids)
            store.commit()
        rows.append(("append_batch, backlog path (all of the above + checks)", _time(append, rounds)))
        rows.append(("append_batch, ring path (warm ring)", _time(append_ring, rounds)))
        rows.append(("append_batch, mixed lengths 50-150 B, backlog path", _time(append_mixed, rounds)))

        def take(i: int) -> None:
            bodies, ids = batches[i % 50]
            store.append_batch(bodies, 0, message_ids=ids)
            store.staged.take_payload()

        took = _time(take, rounds) - rows[2][1]
        rows.append(("take_payload (heap copied behind the rows)", took))
        store.append_batch(*batches[1][:1], 0, message_ids=batches[1][1])
        payload, count, first, last = store.staged.take_payload()
        raw = bytes(payload)
        table, heap = raw[: count * 88], raw[count * 88 :]
        rows.append(
            (
                "LZ4 of record table + heap (one call, as commit does)",
                _time(lambda i: lz4.block.compress(raw, store_size=False), rounds),
            )
        )
        rows.append(
            (
                "  LZ4 of the 8.8 KB record table alone",
                _time(lambda i: lz4.block.compress(table, store_size=False), rounds),
            )
        )
        rows.append(
            (
                "  LZ4 of the 10 KB heap alone",
                _time(lambda i: lz4.block.compress(heap, store_size=False), rounds),
            )
        )
        comp = lz4.block.compress(raw, store_size=False)

        def header(i: int) -> None:
            head = HEADER.pack(MAGIC, 1, 1, 0, count, first, last, len(raw), len(comp), crc32c.crc32c(comp))
            crc32c.crc32c(head)

        rows.append(("CRC32C of payload + header", _time(header, rounds)))
        head, comp = encode_payload(raw, count, first, last)
        fd = os.open(tmp / "w.seg", os.O_WRONLY | os.O_CREAT, 0o644)
        offset = [0]

        def write(i: int) -> None:
            offset[0] += os.pwritev(fd, (head, comp), offset[0])

        rows.append((f"pwritev of the {len(head) + len(comp):,}-byte block, appending", _time(write, rounds)))
        os.close(fd)
        commit_store = PartitionStore.open(tmp / "c", StorageConfig(fsync="interval"), now_ms=0)

        def commit(i: int) -> None:
            bodies, ids = batches[i % 50]
            commit_store.append_batch(bodies, 0, message_ids=ids)
            commit_store.commit()

        rows.append(("append_batch + commit (the benchmark's loop body)", _time(commit, rounds)))
        arena = np.zeros(32 << 20, np.uint8)
        arena[:] = 0
        joined = b"".join(batches[0][0])
        rows.append(("bare: join of 100 bodies", _time(lambda i: b"".join(batches[i % 50][0]), rounds)))
        rows.append(
            (
                "bare: copy into the numpy arena",
                _time(lambda i: arena.__setitem__(slice(0, 10000), np.frombuffer(joined, np.uint8)), rounds),
            )
        )
        rows.append(
            ("bare: LZ4 of the 10 KB", _time(lambda i: lz4.block.compress(joined, store_size=False), rounds))
        )

        def bare(i: int) -> None:
            raw = b"".join(batches[i % 50][0])
            arena[0 : len(raw)] = np.frombuffer(raw, np.uint8)
            lz4.block.compress(raw, store_size=False)

        rows.append(("bare loop body (all three)", _time(bare, rounds)))
        store.close()
        ring_store.close()
        commit_store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| piece | µs per batch of 100 (thread CPU time, median) |\n|---|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")
    print()
    print(in_loop(batches, rounds))
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
