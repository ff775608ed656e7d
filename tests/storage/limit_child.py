"""Scenarios run in a child process under a lowered resource limit (the
test process keeps its own). Exits 0 on success; prints what it checked.

``fsize DIR``: RLIMIT_FSIZE (``ulimit -f``) below the segment size (SIGXFSZ
ignored, so writes fail with EFBIG, as in a host: Python ignores it). A
segment the limit stops is rolled and writes go on; a block that does not fit
in a new segment either is refused with a DiskFull that names the limit (not
"free space"), committed data untouched; raising the limit lets it in.

``nofile DIR``: RLIMIT_NOFILE (``ulimit -n``) low: opening stores until the
descriptors run out raises an error naming the open-file limit and leaves
nothing open (the failed store's directory lock is released: it opens once a
descriptor is free).

Usage: python -m tests.storage.limit_child fsize|nofile DIR
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from pathlib import Path

from tests.storage.disk_full_scenario import drain
from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.errors import DiskFull, Unavailable

CONFIG = StorageConfig(ring_slots=256, arena_bytes=1 << 22, segment_bytes_max=1 << 22, fsync="always")
LIMIT = 256 * 1024


def fsize(directory: Path) -> str:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, hard))
    store = PartitionStore.open(directory, CONFIG, now_ms=1)
    committed: dict[int, bytes] = {}
    for tag in range(24):  # ~1.5 MiB of incompressible-enough 64 KB blocks: past the limit 6 times
        batch = [NewMessage(f"{tag:08d}{i:08d}".encode(), os.urandom(8000)) for i in range(8)]
        seqs = store.append(batch, now_ms=1 + tag)
        store.commit()
        committed.update({s: m.body for s, m in zip(seqs, batch, strict=True)})
    segments = sorted(directory.glob("*.seg"))
    assert len(segments) >= 5, f"the segment was not rolled at the limit: {segments}"
    assert all(p.stat().st_size <= LIMIT for p in segments)
    big = [NewMessage(b"b" * 16, os.urandom(LIMIT + 1000))]
    store.append(big, now_ms=100)
    try:
        store.commit()
    except DiskFull as exc:
        text = str(exc)
    else:
        raise AssertionError("a block larger than the file-size limit was taken")
    assert "ulimit -f" in text and f"{LIMIT} bytes" in text and "raise the limit" in text, text
    assert "free space on that disk" not in text, text
    assert store.stats(200)["total"] == len(committed)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    [seq] = store.append(big, now_ms=300)
    store.commit()
    store.close()
    reopened = PartitionStore.open(directory, CONFIG, now_ms=400)
    assert reopened.recovery_report.corrupt_blocks == [], reopened.recovery_report
    bodies = drain(reopened, 400)
    reopened.close()
    assert all(bodies[s] == b for s, b in committed.items()), "committed data changed"
    assert bodies[seq] == big[0].body
    return f"ok: {len(segments)} segments under the limit; refused: {text}"


def nofile(directory: Path) -> str:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    config = StorageConfig(fsync="never")
    for i in range(3):  # each with a segment: the active one is open too
        with PartitionStore.open(directory / f"s{i}", config, now_ms=1) as s:
            s.append_batch([b"x"], now_ms=1)
            s.commit()
    stores = []
    error: Unavailable | None = None
    for n in range(200):  # the three with a segment first
        failed = directory / (f"s{n}" if n < 3 else f"t{n}")
        try:
            stores.append(PartitionStore.open(failed, config, now_ms=1))
        except Unavailable as exc:
            error = exc
            break
    assert error is not None, "the descriptors never ran out"
    text = str(error)
    assert "ulimit -n" in text and "open-file limit" in text and str(failed) in text, text
    assert error.details["errno"] in ("EMFILE", "ENFILE"), error.details
    stores.pop().close()
    again = PartitionStore.open(failed, config, now_ms=1)  # its lock was released
    again.close()
    for s in stores:
        s.close()
    return f"ok: {len(stores) + 1} stores open, then: {text}"


if __name__ == "__main__":
    scenario, where = sys.argv[1], Path(sys.argv[2])
    print({"fsize": fsize, "nofile": nofile}[scenario](where), flush=True)
