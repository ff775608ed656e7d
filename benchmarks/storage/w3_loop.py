"""A host's W3 work inside one store, with a backlog past the ring.

Run: ``python -m benchmarks.storage.w3_loop [--rounds 5] [--backlog 300000]``.

A fresh store (the host's default ring: 65,536 slots, 32 MiB) first gets
``--backlog`` 100-byte messages in commits of 100, so most of them live only
in the log. Then each step does what a host does per pass in W3: append a
batch of 100, ``receive_columns(100)``, ``delete_columns`` of what it got
(the consumer's dref), one commit. Each block then holds 100 MESSAGE records
beside VISIBILITY and DELETE records, as a host's do, and the receives page
the backlog in as the deletes free the ring.

Prints the **thread CPU time** per step (µs; medians of ``--rounds`` fresh
stores of ``--steps`` steps), the tail of the steps' wall-clock times (p99,
p99.9, max: the steps that compact the ring or page in a lot, which a host's
other requests wait behind) and a JSON line. To compare two trees, run it
from each in turn (``PYTHONPATH=<tree>``), A B B A.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from zmqueue.dataplane.storage import Columns, PartitionStore, StorageConfig

BATCH = 100


def step_us(backlog: int, steps: int) -> tuple[float, list[float]]:
    """Thread CPU µs per step, and each step's wall-clock ms."""
    bodies = [os.urandom(20) + bytes(80) for _ in range(BATCH)]
    d = Path(tempfile.mkdtemp(prefix="zmq-w3-loop-"))
    try:
        store = PartitionStore.open(d, StorageConfig(fsync="interval"), now_ms=1)
        for _ in range(backlog // BATCH):
            store.append_batch(bodies, 1)
            store.commit()
        got = 0
        walls: list[float] = []
        start = time.thread_time()
        for _ in range(steps):
            t0 = time.perf_counter()
            store.append_batch(bodies, 1)
            cols, _ = store.receive_columns(BATCH, 1, 30_000)
            assert isinstance(cols, Columns)
            got += cols.size
            store.delete_columns(cols.seqs, cols.receive_counts, 1)
            store.commit()
            walls.append((time.perf_counter() - t0) * 1000)
        elapsed = time.thread_time() - start
        assert got == steps * BATCH, f"received {got} of {steps * BATCH}"
        store.close()
        return elapsed / steps * 1e6, sorted(walls)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backlog", type=int, default=300_000)
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    runs = [step_us(args.backlog, args.steps) for _ in range(args.rounds)]
    cpu = [r[0] for r in runs]
    tails = {name: statistics.median(w[min(len(w) - 1, int(len(w) * q))] for _, w in runs)
             for name, q in (("p99_ms", 0.99), ("p99.9_ms", 0.999), ("max_ms", 1.0))}
    med = statistics.median(cpu)
    print(f"append {BATCH} + receive_columns {BATCH} + delete_columns + commit, "
          f"backlog {args.backlog:,}: {med:.1f} us per step (thread CPU; "
          f"rounds {', '.join(f'{r:.1f}' for r in cpu)}); step wall time "
          + ", ".join(f"{k[:-3]} {v:.2f} ms" for k, v in tails.items()))
    print(json.dumps({"us_per_step": med, "rounds": cpu, **tails, "backlog": args.backlog,
                      "steps": args.steps, "loadavg_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
