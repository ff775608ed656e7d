"""Simulated logs for the example report in docs/ANALYTICS.md (storage engine, simulated clock).

    python -m benchmarks.analytics.example_logs DIR [--minutes 30]
    zmqueue analytics report --data DIR --out report/

Three queues on one host over ``minutes`` simulated minutes: ``orders``
(steady, prompt consumers), ``payments`` (a burst the consumers take a while
to drain) and ``jobs`` (a consumer that fails 20% of the time: redeliveries,
and dead letters into ``jobs-dlq`` after 3 receives).
"""

from __future__ import annotations

import argparse
import json
import random
import uuid
from pathlib import Path

import msgpack

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig

T0_MS = 1_767_258_000_000  # 2026-01-01T09:00:00Z
STEP_MS = 1000
VIS_MS = 30_000


def _open(root: Path, queue: str, node: str) -> PartitionStore:
    return PartitionStore.open(root / "queues" / queue / "0" / node, StorageConfig(fsync="never"),
                               now_ms=T0_MS)


def simulate(root: Path, minutes: int, node: str = "host-1", seed: int = 7) -> None:
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "host.json").write_text(json.dumps({"node": node, "cluster": "example"}))
    stores = {q: _open(root, q, node) for q in ("orders", "payments", "jobs", "jobs-dlq")}
    for step in range(minutes * 60_000 // STEP_MS):
        now = T0_MS + step * STEP_MS
        minute = step * STEP_MS // 60_000
        sends = {"orders": rnd.randint(3, 8),
                 "payments": 40 if 8 <= minute < 12 else rnd.randint(0, 3),
                 "jobs": rnd.randint(1, 3)}
        for q, n in sends.items():
            stores[q].append([NewMessage(uuid.uuid4().bytes, rnd.randbytes(rnd.randint(50, 900)))
                              for _ in range(n)], now)
        capacity = {"orders": 10, "payments": 12, "jobs": 4, "jobs-dlq": 1}
        for q, cap in capacity.items():
            got, dead = stores[q].receive(cap, now, VIS_MS, max_receive_count=3 if q == "jobs" else None)
            if dead:
                blobs = [msgpack.packb({"src": q, "rc": d.receive_count}) for d in dead]
                stores["jobs-dlq"].append([NewMessage(d.message_id, d.body, b)
                                           for d, b in zip(dead, blobs, strict=True)], now)
                stores[q].mark_dead_lettered([d.seq for d in dead], now)
            for d in got:
                if q == "jobs" and rnd.random() < 0.2:
                    continue  # the consumer failed: the message comes back after the visibility timeout
                stores[q].delete(d.seq, d.receive_count, now + rnd.randint(5, 400))
        for s in stores.values():
            s.commit()
    for s in stores.values():
        s.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--minutes", type=int, default=30)
    args = ap.parse_args()
    simulate(Path(args.dir) / "host-1", args.minutes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
