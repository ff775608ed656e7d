"""Storage engine benchmarks, each beside a ceiling measured in the same run.

Run: ``python -m benchmarks.storage.bench_storage [--backlog 10000000] [--out docs/perf/storage.md]
[--only append|drain|probe|single|backlog ...]``
Prints a markdown table (medians of RUNS interleaved rounds) and writes it with the machine
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

from zmqueue.dataplane.storage import Columns, NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.storage.records import encode_payload
from zmqueue.dataplane.storage.ring import META_DTYPE

RUNS = 5  # interleaved rounds; every figure is the median over rounds
RECEIVE_RUNS = 9  # x 100 receives of 10: 9,000 of the small store's 10,000 messages
BATCH = 100
BODY = 100

Batch = tuple[list[bytes], bytes]  # bodies, concatenated 16-byte ids


def _batches(count: int, body: int = BODY) -> list[Batch]:
    rng = np.random.default_rng(1)
    out = []
    for b in range(count):
        raw = rng.integers(0, 64, size=BATCH * body, dtype=np.uint8).tobytes()  # ~6 bits/byte
        bodies = [raw[i * body : (i + 1) * body] for i in range(BATCH)]
        ids = b"".join((b * BATCH + i).to_bytes(16, "big") for i in range(BATCH))
        out.append((bodies, ids))
    return out


def _mixed(batches: list[Batch]) -> list[Batch]:
    """The same batches with body lengths spread over 50..150 bytes (mean 100)."""
    out = []
    for bodies, ids in batches:
        raw = b"".join(bodies) * 2
        lens = [50 + (i * 37) % 101 for i in range(len(bodies))]
        offs = [sum(lens[:i]) for i in range(len(lens))]
        out.append(([raw[o : o + n] for o, n in zip(offs, lens, strict=True)], ids))
    return out


def _objects(batches: list[Batch]) -> list[list[NewMessage]]:
    return [
        [NewMessage(ids[i * 16 : (i + 1) * 16], body) for i, body in enumerate(bodies)]
        for bodies, ids in batches
    ]


def _interleaved(*fns: Callable[[], float], runs: int = RUNS) -> list[list[float]]:
    """Run the measures round-robin ``runs`` times; one list of results per measure."""
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            out[i].append(fn())
    return out


def append_rate(tmp: Path, batches: list[Batch], total: int) -> float:
    """append_batch + commit per batch of 100, fsync=interval; msgs/s."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    store = PartitionStore.open(d, StorageConfig(fsync="interval"), now_ms=0)
    start = time.perf_counter()
    for i in range(total // BATCH):
        bodies, ids = batches[i % len(batches)]
        store.append_batch(bodies, 0, message_ids=ids)
        store.commit()
    elapsed = time.perf_counter() - start
    store.close()
    shutil.rmtree(d)
    return total / elapsed


def append_objects_rate(tmp: Path, batches: list[list[NewMessage]], total: int) -> float:
    """The object API (append of NewMessage lists) + commit, for comparison."""
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


_ARENA = np.zeros(32 << 20, np.uint8)


def bare_rate(batches: list[Batch], total: int) -> float:
    """Ceiling: join the same bodies, copy them into a numpy arena, LZ4 them."""
    start = time.perf_counter()
    top = 0
    for i in range(total // BATCH):
        raw = b"".join(batches[i % len(batches)][0])
        if top + len(raw) > len(_ARENA):
            top = 0
        _ARENA[top : top + len(raw)] = np.frombuffer(raw, np.uint8)
        top += len(raw)
        lz4.block.compress(raw, store_size=False)
    return total / (time.perf_counter() - start)


def _blocks(tmp: Path, batches: list[Batch]) -> list[tuple[bytes, int, int]]:
    """(raw payload, record count, first seq) of the block each batch commits as."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    out = []
    with PartitionStore.open(d, StorageConfig(fsync="never"), now_ms=0) as store:
        for bodies, ids in batches:
            store.append_batch(bodies, 0, message_ids=ids)
            store.commit()
            assert store.last_block is not None
            table, heap = store.last_block
            out.append((table.tobytes() + heap, len(table), int(table["seq"][0])))
    shutil.rmtree(d)
    return out


def floor_rate(tmp: Path, blocks: list[tuple[bytes, int, int]], total: int) -> float:
    """The work a commit cannot skip, on the same blocks: LZ4 of the raw payload
    (record table + heap), the two CRC32Cs and header, one pwritev appending
    header + payload to a file.  No staging, no ring: the format's floor."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    fd = os.open(d / "floor.seg", os.O_WRONLY | os.O_CREAT, 0o644)
    offset = 0
    start = time.perf_counter()
    for i in range(total // BATCH):
        raw, count, first = blocks[i % len(blocks)]
        head, comp = encode_payload(raw, count, first, first + count - 1)
        offset += os.pwritev(fd, (head, comp), offset)
    elapsed = time.perf_counter() - start
    os.close(fd)
    shutil.rmtree(d)
    return total / elapsed


def build_backlog(d: Path, count: int, config: StorageConfig) -> None:
    batches = _batches(10)
    bodies = [b for bs, _ in batches for b in bs]  # 1000 x 100-byte bodies
    ids = b"".join(i for _, i in batches)
    with PartitionStore.open(d, config, now_ms=0) as store:
        for _ in range(count // 1000):
            store.append_batch(bodies, 0, message_ids=ids)
            store.commit()


def receive_cost_us(store: PartitionStore, calls: int = 100) -> float:
    """Mean cost of receive(10) (mark in flight, log VISIBILITY, build Delivered)."""
    start = time.perf_counter()
    for _ in range(calls):
        got, _ = store.receive(10, 1, 3_600_000)
        assert len(got) == 10
    return (time.perf_counter() - start) / calls * 1e6


def _drain(tmp: Path, total: int, take: Callable[[PartitionStore], int]) -> float:
    """A store of ``total`` 100-byte messages (ring 65,536 slots and 8 MiB,
    fsync=interval), emptied by ``take`` (one consumer step: receive,
    delete, return how many) and a commit per step; msgs/s."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    config = StorageConfig(ring_slots=65536, arena_bytes=8 << 20, fsync="interval")
    store = PartitionStore.open(d, config, now_ms=1)
    bodies = [b for bs, _ in _batches(10) for b in bs]  # 1000 x 100 B
    for _ in range(total // len(bodies)):
        store.append_batch(bodies, 1)
        store.commit()
    done = 0
    start = time.perf_counter()
    while done < total:
        done += take(store)
        store.commit()
    elapsed = time.perf_counter() - start
    assert store.stats(1)["total"] == 0
    store.close()
    shutil.rmtree(d)
    return total / elapsed


def drain_rate(tmp: Path, total: int = 20_000, k: int = 10) -> float:
    """receive(k) + delete each by its receipt + commit, until ``total`` are gone; msgs/s.

    The consumer side of W3 inside one store: per call one VISIBILITY record
    per message, then k single DELETEs, then one block.  fsync=interval.
    """

    def take(store: PartitionStore) -> int:
        got, _ = store.receive(k, 1, 30_000)
        for m in got:
            store.delete(m.seq, m.receive_count, 1)
        return len(got)

    return _drain(tmp, total, take)


def drain_batch_rate(tmp: Path, columns: bool, total: int = 200_000, k: int = 100) -> float:
    """A host's consumer path for W3: receive(k) and the previous batch's
    deletes in one call each, commit, until ``total`` are gone; msgs/s. The
    backlog (20 MB) is larger than the ring's 8 MiB arena, so it pages in.
    ``columns``: receive_columns + delete_columns (a RECEIVE ``cols`` with
    ``dref``), else receive (Delivered values) + delete_many (receipts)."""

    def take_columns(store: PartitionStore) -> int:
        cols, _ = store.receive_columns(k, 1, 30_000)
        assert isinstance(cols, Columns)
        store.delete_columns(cols.seqs, cols.receive_counts, 1)
        return cols.size

    def take_rows(store: PartitionStore) -> int:
        got, _ = store.receive(k, 1, 30_000)
        store.delete_many([(m.seq, m.receive_count) for m in got], 1)
        return len(got)

    return _drain(tmp, total, take_columns if columns else take_rows)


def bench_drain(tmp: Path) -> list[tuple[str, str, str, str]]:
    rates, rows, cols = _interleaved(lambda: drain_rate(tmp), lambda: drain_batch_rate(tmp, False),
                                     lambda: drain_batch_rate(tmp, True))
    return [
        (
            "receive 10 + delete each by receipt + commit (20,000 msgs in the ring)",
            f"{statistics.median(rates):,.0f} msg/s",
            "",
            "",
        ),
        (
            "receive 100 + delete_many + commit (200,000 msgs, a backlog past the ring)",
            f"{statistics.median(rows):,.0f} msg/s",
            "",
            "",
        ),
        (
            "receive_columns 100 + delete_columns + commit (the same; a host's RECEIVE cols + dref)",
            f"{statistics.median(cols):,.0f} msg/s",
            f"{statistics.median(cols) / statistics.median(rows):.2f}x the row above",
            "",
        ),
    ]


def probe_cost_us(tmp: Path, fifo: bool, calls: int = 2000) -> float:
    """has_visible() per loop tick, 20,000 messages in the ring all delayed (the
    long-poll case: nothing to hand out, time moves on by 1 ms per call)."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    store = PartitionStore.open(d, StorageConfig(fsync="never", fifo=fifo), now_ms=1)
    bodies = [b for bs, _ in _batches(10) for b in bs]
    groups = np.arange(len(bodies), dtype=np.uint64) % 50 + 1 if fifo else None
    for _ in range(20):
        store.append_batch(bodies, 1, delay_ms=3_600_000, group_hashes=groups)
        store.commit()
    start = time.perf_counter()
    for i in range(calls):
        assert not store.has_visible(2 + i)
    elapsed = time.perf_counter() - start
    store.close()
    shutil.rmtree(d)
    return elapsed / calls * 1e6


def wakeup_cost_us(tmp: Path, scan: bool, calls: int = 2000) -> float:
    """next_wakeup_ms() per loop tick of a parked long poll, a full ring
    (65,536 slots) every message in flight for 5 min, time moving on by 1 ms
    per call; ``scan``: the cached answer dropped before each call (what every
    call cost before the cache: one scan of the ring)."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    store = PartitionStore.open(d, StorageConfig(fsync="never"), now_ms=1)
    slots = store.ring.slots
    bodies = [b"w" * 100] * 1024
    for _ in range(slots // len(bodies)):
        store.append_batch(bodies, 1)
        store.commit()
    while store.receive(1000, 1, 300_000)[0]:
        pass
    store.commit()
    assert store.ring.live == slots and not store.has_visible(2)
    ring = store.ring
    start = time.perf_counter()
    for i in range(calls):
        if scan:
            ring.wake = (-1, 0, None)
        assert store.next_wakeup_ms(2 + i) == 300_001
    elapsed = time.perf_counter() - start
    store.close()
    shutil.rmtree(d)
    return elapsed / calls * 1e6


def housekeeping_cost_us(tmp: Path, scan: bool, calls: int = 500) -> float:
    """expire() + compact() of a stream whose ring is full (65,536 messages,
    nothing old enough to expire, no segment to delete): what a host's
    once-a-second housekeeping costs per stream with a backlog; ``scan``:
    the ring's hints (first live slot, oldest enqueue time) dropped before
    each call (what every call cost before them: two scans of the ring)."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    store = PartitionStore.open(d, StorageConfig(fsync="never"), now_ms=1)
    bodies = [b"h" * 100] * 1024
    for _ in range(store.ring.slots // len(bodies)):
        store.append_batch(bodies, 1)
        store.commit()
    ring = store.ring
    assert ring.live == ring.slots
    start = time.perf_counter()
    for i in range(calls):
        if scan:
            ring.head, ring.enqueued_floor = 0, -(1 << 62)
        assert store.expire(2 + i) == 0
        store.compact()
    elapsed = time.perf_counter() - start
    store.close()
    shutil.rmtree(d)
    return elapsed / calls * 1e6


def bench_probe(tmp: Path) -> list[tuple[str, str, str, str]]:
    std, fifo = _interleaved(lambda: probe_cost_us(tmp, False), lambda: probe_cost_us(tmp, True))
    cached, scanned = _interleaved(lambda: wakeup_cost_us(tmp, False), lambda: wakeup_cost_us(tmp, True))
    kept, rescanned = _interleaved(lambda: housekeeping_cost_us(tmp, False),
                                   lambda: housekeeping_cost_us(tmp, True))
    return [
        (
            "has_visible per tick, 20,000 delayed msgs in the ring (standard / FIFO)",
            f"{statistics.median(std):.1f} / {statistics.median(fifo):.1f} us/call",
            "",
            "",
        ),
        (
            "next_wakeup per tick of a parked poll, 65,536 msgs in flight (cached / a scan per call)",
            f"{statistics.median(cached):.2f} / {statistics.median(scanned):.0f} us/call",
            f"{statistics.median(scanned) / statistics.median(cached):,.0f}x",
            "",
        ),
        (
            "expire + compact of a full ring (65,536 msgs; the hints kept / dropped before each call)",
            f"{statistics.median(kept):.1f} / {statistics.median(rescanned):.0f} us/call",
            f"{statistics.median(rescanned) / statistics.median(kept):,.0f}x",
            "",
        ),
    ]


def single_costs_us(tmp: Path, rounds: int = RUNS, n: int = 3000) -> dict[str, list[float]]:
    """One message per request, as W1/W5 drive a host: send 1, receive 1,
    delete 1 on a writer store, each committed and its block applied and
    committed by a replica store (what a replica does per REPLICATE). Thread
    CPU per call, one figure per round (fresh stores each round)."""
    out: dict[str, list[float]] = {}
    for r in range(rounds):
        w = PartitionStore.open(tmp / f"single_w{r}", StorageConfig())
        rep = PartitionStore.open(tmp / f"single_r{r}", StorageConfig())
        for name, total in _single_round(w, rep, n).items():
            out.setdefault(name, []).append(total / n * 1e6)
        w.close()
        rep.close()
    return out


def _single_round(w: PartitionStore, rep: PartitionStore, n: int) -> dict[str, float]:
    from zmqueue.dataplane.replication import decode_chunks, encode_chunks

    clock = time.thread_time
    acc = dict.fromkeys(("writer: send 1 + commit", "writer: receive_columns 1 + commit",
                         "writer: delete_columns 1 + commit", "replica: apply + commit, MESSAGE",
                         "replica: apply + commit, VISIBILITY", "replica: apply + commit, DELETE"), 0.0)
    now = int(time.time() * 1000)

    def replicate(kind: str) -> None:
        wire = encode_chunks(w.read_chunks(w.last_seq, 2000))
        t = clock()
        for table, heap in decode_chunks(wire):
            rep.apply_chunk(table, heap)
        rep.commit()
        acc[f"replica: apply + commit, {kind}"] += clock() - t

    for _ in range(n):
        t = clock()
        w.append_batch([b"x" * BODY], now)
        w.commit()
        acc["writer: send 1 + commit"] += clock() - t
        replicate("MESSAGE")
        t = clock()
        got, _ = w.receive_columns(1, now, 30_000)
        w.commit()
        acc["writer: receive_columns 1 + commit"] += clock() - t
        assert isinstance(got, Columns) and got.size == 1
        replicate("VISIBILITY")
        t = clock()
        w.delete_columns(got.seqs, got.receive_counts, now)
        w.commit()
        acc["writer: delete_columns 1 + commit"] += clock() - t
        replicate("DELETE")
    return acc


def bench_single(tmp: Path) -> list[tuple[str, str, str, str]]:
    return [(f"one message per call: {name} (thread CPU)", f"{statistics.median(v):.1f} us/call",
             "per round " + ", ".join(f"{x:.1f}" for x in v), "")
            for name, v in single_costs_us(tmp).items()]


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


def bench_append(tmp: Path, total: int) -> list[tuple[str, str, str, str]]:
    batches = _batches(50)
    mixed = _mixed(batches)
    objects = _objects(batches)
    blocks = _blocks(tmp, batches)
    _ARENA[:] = 1  # page the arena in: the first bare round would otherwise pay 8,192 page faults
    ours, bare, floor, mix, objs = _interleaved(
        lambda: append_rate(tmp, batches, total),
        lambda: bare_rate(batches, total),
        lambda: floor_rate(tmp, blocks, total),
        lambda: append_rate(tmp, mixed, total),
        lambda: append_objects_rate(tmp, objects, total),
    )
    bare_m = statistics.median(bare)
    ratios = ", ".join(f"{o / b:.0%}" for o, b in zip(ours, bare, strict=True))
    return [
        (
            "append_batch 100 B x batch 100 + commit, fsync=interval",
            f"{statistics.median(ours):,.0f} msg/s ({statistics.median(ours) / bare_m:.0%} of bare)",
            f"bare join+copy+LZ4 loop {bare_m:,.0f} msg/s; per round {ratios}",
            ">= 1,000,000 msg/s and >= 30% of bare",
        ),
        (
            "(floor) LZ4 + CRC32C + header + pwritev of the same blocks, nothing else",
            f"{statistics.median(floor):,.0f} msg/s ({statistics.median(floor) / bare_m:.0%} of bare)",
            "the most append+commit can reach with this format",
            "",
        ),
        (
            "append_batch, body lengths 50-150 B (mean 100) + commit",
            f"{statistics.median(mix):,.0f} msg/s ({statistics.median(mix) / bare_m:.0%} of bare)",
            "",
            "",
        ),
        ("(object API) append of NewMessage lists + commit", f"{statistics.median(objs):,.0f} msg/s", "", ""),
    ]


def bench_backlog(tmp: Path, backlog: int) -> list[tuple[str, str, str, str]]:
    ring = StorageConfig(ring_slots=65536, arena_bytes=8 << 20, fsync="never")
    small, big = tmp / "small", tmp / "big"
    build_backlog(small, 10_000, ring)
    t0 = time.perf_counter()
    build_backlog(big, backlog, ring)
    build_s = time.perf_counter() - t0
    seg_bytes = sum(p.stat().st_size for p in big.glob("*.seg"))
    os.sync()  # write back the 1.2 GB now, not while we time
    base_rss = rss_bytes()  # after building, so only the open store is counted
    t0 = time.perf_counter()
    store = PartitionStore.open(big, ring, now_ms=1)
    open_s = time.perf_counter() - t0
    rss = rss_bytes() - base_rss
    with PartitionStore.open(small, ring, now_ms=1) as small_store:
        small_us, big_us = _interleaved(
            lambda: receive_cost_us(small_store), lambda: receive_cost_us(store), runs=RECEIVE_RUNS
        )
    stats = store.stats(1)
    store.close()
    ratio = statistics.median(big_us) / statistics.median(small_us)
    ring_bytes = ring.ring_slots * META_DTYPE.itemsize + ring.arena_bytes
    return [
        (
            f"receive 10 + mark in flight, {backlog:,} backlog",
            f"{statistics.median(big_us):.1f} us/call",
            f"10,000 backlog {statistics.median(small_us):.1f} us/call ({ratio:.2f}x)",
            "<= 1.5x",
        ),
        (
            "recovery scan (open) of that log",
            f"{seg_bytes / open_s / 1e6:,.0f} MB/s",
            f"{seg_bytes / 1e6:,.0f} MB in {open_s:.2f} s; {backlog / open_s / 1e6:.2f} M records/s",
            ">= 200 MB/s",
        ),
        (
            f"RSS growth with {stats['backlog_on_disk']:,} msgs on disk",
            f"{rss / 2**20:.1f} MiB",
            f"configured ring {ring_bytes / 2**20:.1f} MiB",
            "<= 1.3x ring + fixed",
        ),
        ("(setup) build the backlog", f"{backlog / build_s:,.0f} msg/s", "", ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=10_000_000)
    parser.add_argument("--append-messages", type=int, default=300_000)
    parser.add_argument("--out", default="")
    parser.add_argument("--only", choices=["append", "drain", "probe", "single", "backlog"], action="append")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="zmq-bench-"))
    rows: list[tuple[str, str, str, str]] = []
    try:
        only = set(args.only or ["append", "drain", "probe", "single", "backlog"])
        if "append" in only:
            rows += bench_append(tmp, args.append_messages)
        if "drain" in only:
            rows += bench_drain(tmp)
        if "probe" in only:
            rows += bench_probe(tmp)
        if "single" in only:
            rows += bench_single(tmp)
        if "backlog" in only:
            rows += bench_backlog(tmp, args.backlog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = "| measure | result | ceiling / reference (same run) | target |\n|---|---|---|---|\n"
    table += "".join(f"| {a} | {b} | {c} | {d} |\n" for a, b, c, d in rows)
    info = f"{machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end"
    print(table)
    print(info)
    if args.out:
        Path(args.out).write_text(table + "\n" + info + "\n")


if __name__ == "__main__":
    main()
