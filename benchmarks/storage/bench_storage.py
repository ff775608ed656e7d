"""Storage engine benchmarks, each beside a ceiling measured in the same run.

Run: ``python -m benchmarks.storage.bench_storage [--backlog 10000000] [--out docs/perf/storage.md]``
Prints a markdown table (medians of 3 runs) and writes it with the machine
description to ``--out``.  Bounded to a few minutes.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lz4.block
import numpy as np

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.storage.ring import META_DTYPE

RUNS = 3
BATCH = 100
BODY = 100


def _batches(count: int, body: int = BODY) -> list[list[NewMessage]]:
    rng = np.random.default_rng(1)
    out = []
    for b in range(count):
        raw = rng.integers(0, 64, size=BATCH * body, dtype=np.uint8).tobytes()  # ~6 bits/byte
        out.append(
            [
                NewMessage((b * BATCH + i).to_bytes(16, "big"), raw[i * body : (i + 1) * body])
                for i in range(BATCH)
            ]
        )
    return out


def _median(fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(RUNS))


def bench_append(tmp: Path, batches: list[list[NewMessage]], total: int) -> float:
    def once() -> float:
        d = Path(tempfile.mkdtemp(dir=tmp))
        store = PartitionStore.open(d, StorageConfig(fsync="interval"), now_ms=0)
        start = time.perf_counter()
        for i in range(total // BATCH):
            store.append(batches[i % len(batches)], 0)
            store.commit()
        elapsed = time.perf_counter() - start
        store.close()
        shutil.rmtree(d)
        return total / elapsed

    return _median(once)


def bench_bare(batches: list[list[NewMessage]], total: int) -> float:
    arena = np.zeros(32 << 20, np.uint8)

    def once() -> float:
        start = time.perf_counter()
        top = 0
        for i in range(total // BATCH):
            raw = b"".join([m.body for m in batches[i % len(batches)]])
            if top + len(raw) > len(arena):
                top = 0
            arena[top : top + len(raw)] = np.frombuffer(raw, np.uint8)
            top += len(raw)
            lz4.block.compress(raw, store_size=False)
        return total / (time.perf_counter() - start)

    return _median(once)


def build_backlog(d: Path, count: int, config: StorageConfig) -> None:
    batch = [m for b in _batches(10) for m in b]  # 1000 x 100-byte bodies
    with PartitionStore.open(d, config, now_ms=0) as store:
        for _ in range(count // 1000):
            store.append(batch, 0)
            store.commit()


def receive_cost_us(store: PartitionStore, calls: int = 900) -> float:
    def once() -> float:
        start = time.perf_counter()
        for _ in range(calls // RUNS):
            got, _ = store.receive(10, 1, 3_600_000)
            assert len(got) == 10
        return (time.perf_counter() - start) / (calls // RUNS) * 1e6

    return _median(once)


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def machine() -> str:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"nproc={os.cpu_count()}, CPU: {cpu}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=10_000_000)
    parser.add_argument("--append-messages", type=int, default=300_000)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="zmq-bench-"))
    rows: list[tuple[str, str, str, str]] = []
    try:
        batches = _batches(50)
        ours = bench_append(tmp, batches, args.append_messages)
        bare = bench_bare(batches, args.append_messages)
        rows.append(
            (
                "append 100 B x batch 100 + commit, fsync=interval",
                f"{ours:,.0f} msg/s",
                f"bare copy+LZ4 loop {bare:,.0f} msg/s ({ours / bare:.0%})",
                ">= 1,000,000 msg/s and >= 30% of bare",
            )
        )
        ring = StorageConfig(ring_slots=65536, arena_bytes=8 << 20, fsync="never")
        small, big = tmp / "small", tmp / "big"
        build_backlog(small, 10_000, ring)
        t0 = time.perf_counter()
        build_backlog(big, args.backlog, ring)
        build_s = time.perf_counter() - t0
        seg_bytes = sum(p.stat().st_size for p in big.glob("*.seg"))
        with PartitionStore.open(small, ring, now_ms=1) as s:
            small_us = receive_cost_us(s)
        base_rss = rss_bytes()  # after building, so only the open store is counted
        t0 = time.perf_counter()
        store = PartitionStore.open(big, ring, now_ms=1)
        open_s = time.perf_counter() - t0
        rss = rss_bytes() - base_rss
        big_us = receive_cost_us(store)
        stats = store.stats(1)
        store.close()
        rows.append(
            (
                f"receive 10 + mark in flight, {args.backlog:,} backlog",
                f"{big_us:.1f} us/call",
                f"10,000 backlog {small_us:.1f} us/call ({big_us / small_us:.2f}x)",
                "<= 1.5x",
            )
        )
        rows.append(
            (
                "recovery scan (open) of that log",
                f"{seg_bytes / open_s / 1e6:,.0f} MB/s",
                f"{seg_bytes / 1e6:,.0f} MB in {open_s:.2f} s; {args.backlog / open_s / 1e6:.2f} M records/s",
                ">= 200 MB/s",
            )
        )
        ring_bytes = ring.ring_slots * META_DTYPE.itemsize + ring.arena_bytes
        rows.append(
            (
                f"RSS growth with {stats['backlog_on_disk']:,} msgs on disk",
                f"{rss / 2**20:.1f} MiB",
                f"configured ring {ring_bytes / 2**20:.1f} MiB",
                "<= 1.3x ring + fixed",
            )
        )
        rows.append(("(setup) build the backlog", f"{args.backlog / build_s:,.0f} msg/s", "", ""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = "| measure | result | ceiling / reference (same run) | target |\n|---|---|---|---|\n"
    table += "".join(f"| {a} | {b} | {c} | {d} |\n" for a, b, c, d in rows)
    print(table)
    print(machine())
    if args.out:
        Path(args.out).write_text(table + "\n" + machine() + "\n")


if __name__ == "__main__":
    main()
