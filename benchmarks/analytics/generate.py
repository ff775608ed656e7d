"""Write a large synthetic log with the storage engine (benchmarks only).

``records`` MESSAGE records spread over ``queues`` x ``partitions`` partition
directories of one host data directory, one simulated minute of enqueue time
per ``per_minute`` messages, blocks of ``batch`` records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def generate(host_dir: Path, records: int, queues: int = 4, partitions: int = 2,
             batch: int = 20_000, body_bytes: int = 16) -> int:
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "host.json").write_text(json.dumps({"node": host_dir.name, "cluster": "bench"}))
    stores = [(f"bench-q{q}", p) for q in range(queues) for p in range(partitions)]
    per_store = records // len(stores)
    body = b"b" * body_bytes
    written = 0
    for i, (queue, part) in enumerate(stores):
        cfg = StorageConfig(fsync="never", ring_slots=batch * 2, arena_bytes=batch * 2 * (body_bytes + 64),
                            segment_bytes_max=256 * 1024 * 1024)
        store = PartitionStore.open(host_dir / "queues" / queue / str(part), cfg, now_ms=T0_MS)
        ids = np.random.default_rng(i).bytes(16 * per_store)
        for start in range(0, per_store, batch):
            n = min(batch, per_store - start)
            now = T0_MS + (start * 60_000) // 50_000 + i  # ~50k messages a minute per partition
            msgs = [NewMessage(ids[16 * k:16 * k + 16], body) for k in range(start, start + n)]
            store.append(msgs, now)
            store.commit()
            store.purge(now)  # keep the ring empty: the benchmark reads MESSAGE records
            store.commit()
            written += n
        store.close()
    return written


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


if __name__ == "__main__":
    import sys
    import time

    t = time.perf_counter()
    n = generate(Path(sys.argv[1]), int(sys.argv[2]))
    print(n, "records in", round(time.perf_counter() - t, 1), "s,", dir_bytes(Path(sys.argv[1])) >> 20, "MiB",
          os.cpu_count(), "cpus")
