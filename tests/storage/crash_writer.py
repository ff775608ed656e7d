"""Child process for the crash tests: append, delete and commit under fsync=always.

Prints ``A <seq> <id-hex>`` for every appended message and ``X <seq>`` for
every delete once ``commit()`` has returned (i.e. durable), flushing stdout.
Runs until killed.  Usage: python -m tests.storage.crash_writer DIR SEED
"""

from __future__ import annotations

import random
import sys

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig

CONFIG = StorageConfig(ring_slots=256, arena_bytes=1 << 16, segment_bytes_max=1 << 15, fsync="always")


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    now = 1_000_000
    store = PartitionStore.open(directory, CONFIG, now_ms=now)
    print("READY", flush=True)
    counter = 0
    while True:
        now += 1
        batch = []
        for _ in range(rng.randint(1, 20)):
            counter += 1
            mid = f"{seed % 10**6:06d}{counter:010d}".encode()
            batch.append(NewMessage(mid, rng.randbytes(rng.randint(0, 300))))
        seqs = store.append(batch, now)
        delivered, _ = store.receive(rng.randint(0, 5), now, 60_000)
        deleted = [d.seq for d in delivered if rng.random() < 0.7]
        for seq in deleted:
            store.delete(seq, next(d.receive_count for d in delivered if d.seq == seq), now)
        store.commit()
        lines = [f"A {s} {m.message_id.hex()}" for s, m in zip(seqs, batch, strict=True)]
        lines += [f"X {s}" for s in deleted]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
