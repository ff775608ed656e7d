"""How long a host's other queues wait while a big queue is deleted.

    python -m benchmarks.delete_pause [--mib 1024] [--rounds 3]

Starts Consul and one host (``LocalCluster``). Each round fills a queue with
``--mib`` MiB (batches of 100 x 8 KiB random bodies), syncs the disk, then
sends single 100-byte messages to another queue one at a time, recording
each round trip, for ``--window`` seconds with nothing else happening
(``idle``) and then for ``--window`` seconds from the moment the big queue is
deleted (``delete``). The host removes the deleted queue's stream when its
metadata cache sees the deletion, a moment later, inside that window. Prints
one JSON line per round (max and p99.9 of each window, ms) and the medians.

To compare two trees, run it from each in turn (``PYTHONPATH=<tree>``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import zmqueue
from zmqueue.bench.signals import signals_raise
from zmqueue.localcluster import LocalCluster

BODY = 8 * 1024
BATCH = 100


def fill(queue: Any, mib: int) -> None:
    bodies = [os.urandom(BODY) for _ in range(BATCH)]
    for _ in range(mib * 1024 * 1024 // (BODY * BATCH)):
        queue.send_batch(bodies)


def round_trips(queue: Any, seconds: float, during: threading.Event | None = None) -> list[float]:
    """Single sends one at a time for ``seconds``; their round trips in ms.
    ``during``: set once the first send is on its way."""
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        queue.send(b"x" * 100)
        out.append((time.perf_counter() - start) * 1000)
        if during is not None:
            during.set()
    return out


def summary(lat: list[float]) -> dict[str, float]:
    lat = sorted(lat)
    return {"n": len(lat), "max_ms": lat[-1], "p99.9_ms": lat[int(len(lat) * 0.999)],
            "p50_ms": lat[len(lat) // 2]}


def one_round(client: Any, i: int, mib: int, window: float) -> dict[str, Any]:
    big = client.create_queue(f"big-{i}")
    small = client.create_queue(f"small-{i}")
    t0 = time.monotonic()
    fill(big, mib)
    fill_s = time.monotonic() - t0
    os.sync()
    idle = round_trips(small, window)
    started = threading.Event()
    result: list[list[float]] = []
    t = threading.Thread(target=lambda: result.append(round_trips(small, window, started)))
    t.start()
    started.wait(10)
    client.delete_queue(big.name)
    t.join()
    client.delete_queue(small.name)
    return {"round": i, "mib": mib, "fill_s": round(fill_s, 2), "idle": summary(idle),
            "delete": summary(result[0])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=3.0, help="seconds of single sends per window")
    args = ap.parse_args(argv)
    rows = []
    # SIGTERM (e.g. from `timeout`) runs the finally below: hosts and Consul stop by pid
    with signals_raise(), tempfile.TemporaryDirectory(prefix="zmqueue-delete-pause-") as tmp:
        cluster = LocalCluster(Path(tmp), hosts=1).start()
        try:
            with zmqueue.connect(cluster.consul_addr) as client:
                for i in range(args.rounds):
                    row = one_round(client, i, args.mib, args.window)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            cluster.stop()
    for window in ("idle", "delete"):
        print(f"{window:>6}: max {statistics.median(r[window]['max_ms'] for r in rows):.2f} ms, "
              f"p99.9 {statistics.median(r[window]['p99.9_ms'] for r in rows):.2f} ms, "
              f"p50 {statistics.median(r[window]['p50_ms'] for r in rows):.3f} ms "
              f"(medians of {len(rows)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
