"""The cost of a FIFO receive against the backlog behind it.

Run: ``python -m benchmarks.storage.fifo_window [--rounds 3] [--backlogs 10000,65536,10000000]``.

A fresh FIFO store (the host's default ring: 65,536 slots, 32 MiB) gets
each ``--backlogs`` count of 100-byte messages in 50 message groups (commits
of 1,000), so a backlog past the ring lives partly in the log (10 M: 1.2 GB
of segments per round, written in a few seconds, removed after it). Then 200
times: ``receive(10)`` (page-in check, the FIFO pick, marking in flight,
staging the VISIBILITY records), then the deletes of what it got and a
commit, outside the timing. Then, with one message of every group held in
flight, 200 times ``receive(10)`` that finds nothing (what a long poll's
probes and a second receive in flight cost). Prints the **thread CPU time** of the receive
(µs; median of the calls, then of ``--rounds`` rounds, each round a fresh
store of every size in turn) per backlog,
the ratio to the smallest backlog, and a JSON line (with every round's median).

Issue #3's receive target (``receive`` of 10 with 10 M messages of backlog
at most 1.5x its cost with 10 k), measured here for FIFO queues
(``bench_storage``'s backlog rows measure standard queues). Until the
twenty-second session a FIFO pick scanned the ring's whole window on every
receive (3.2x with the ring full); it now takes the groups in flight from
the ring's index of in-flight slots and scans forward from the first live
slot until it has enough (``select.pick_fifo``), so the cost no longer
grows with the messages in the ring.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from zmqueue.dataplane.storage import PartitionStore, StorageConfig

NOW = 1_000_000
GROUPS = 50
CALLS = 200


def one_round(backlog: int) -> tuple[float, float]:
    """Median thread CPU time (µs) of receive(10) on a FIFO store holding
    ``backlog``, then of a receive(10) that finds every group in flight."""
    with tempfile.TemporaryDirectory(prefix="zmqueue-fifo-window-") as d:
        store = PartitionStore.open(Path(d) / "p", StorageConfig(fsync="never", fifo=True), now_ms=NOW)
        try:
            groups = (np.arange(1000) % GROUPS).astype(np.uint64)
            body = [b"x" * 100] * 1000
            for _ in range(backlog // 1000):
                store.append_batch(body, NOW, group_hashes=groups)
                store.commit()
            times = []
            for _ in range(CALLS):
                t0 = time.thread_time()
                got, dead = store.receive(10, NOW, 30_000)
                times.append(time.thread_time() - t0)
                assert len(got) == 10 and not dead, "a FIFO receive of 10 over 50 groups takes 10"
                store.delete_many([(m.seq, m.receive_count) for m in got], NOW)
                store.commit()
            for _ in range(GROUPS // 10):  # hold one message of every group
                got, _ = store.receive(10, NOW, 30_000)
                assert len(got) == 10
            shut = []
            for _ in range(CALLS):
                t0 = time.thread_time()
                got, dead = store.receive(10, NOW, 30_000)
                shut.append(time.thread_time() - t0)
                assert not got and not dead, "every group has a message in flight: nothing to take"
            return statistics.median(times) * 1e6, statistics.median(shut) * 1e6
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backlogs", default="10000,65536,10000000",
                    help="comma-separated message counts (multiples of 1,000 are used)")
    args = ap.parse_args(argv)
    backlogs = [int(b) for b in args.backlogs.split(",")]
    if not backlogs or min(backlogs) < 1000 or args.rounds < 1:
        ap.error("--backlogs of at least 1000 messages each and --rounds >= 1")
    runs: dict[int, list[float]] = {b: [] for b in backlogs}
    shut: dict[int, list[float]] = {b: [] for b in backlogs}
    for _ in range(args.rounds):  # interleaved: each round measures every size, side by side
        for b in backlogs:
            took, none = one_round(b)
            runs[b].append(took)
            shut[b].append(none)
    out: dict[str, object] = {"rounds": args.rounds, "groups": GROUPS}
    for label, key, per in (("receive(10)", "fifo_receive10_us", runs),
                            ("receive(10), every group in flight", "fifo_receive10_all_shut_us", shut)):
        result = {str(b): statistics.median(per[b]) for b in backlogs}
        base = result[str(backlogs[0])]
        for b in backlogs:
            print(f"FIFO {label}, backlog {b:>10,}: {result[str(b)]:8.1f} us "
                  f"({result[str(b)] / base:.2f}x the {backlogs[0]:,} backlog)")
        out[key] = result
        out[key.replace("_us", "_per_round_us")] = {str(b): [round(x, 1) for x in per[b]] for b in backlogs}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
