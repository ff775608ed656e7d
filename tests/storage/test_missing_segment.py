"""Recovery treats a missing segment file like a bad block: the log ends
before the hole and the files after it go (nothing after a hole can be
replayed; docs/SEGMENT_FORMAT.md, "Recovery"). Until the thirty-sixth
session a later file whose first seq did not follow the file before it was
replayed as if nothing were missing: a copy with a silent hole."""

from __future__ import annotations

import random
from pathlib import Path

from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.storage.segment import list_segments

NOW = 1_000_000
CONFIG = StorageConfig(ring_slots=64, arena_bytes=1 << 16, segment_bytes_max=4096, fsync="never")


def test_a_missing_middle_segment_ends_the_log_before_it(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=NOW)
    for i in range(40):  # random bodies: LZ4 cannot shrink them, so files roll every ~4 KiB
        store.append_batch([random.Random(i).randbytes(300)], NOW)
        store.commit()
    store.close()
    files = list_segments(tmp_path)
    assert len(files) >= 4
    (gone_base, gone), (after_base, _) = files[2], files[3]
    gone.unlink()  # lost: an operator's mistake, a failed disk
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=NOW)
    try:
        report = store.recovery_report
        assert store.last_seq == gone_base - 1
        assert [b for b, _ in list_segments(tmp_path)] == [b for b, _ in files[:2]]
        assert [c.reason for c in report.corrupt_blocks] == [
            f"segment starts at seq {after_base}, the log before it ends at {gone_base - 1}"]
        assert report.removed_segments == [p.name for _, p in files[3:]]
        assert [r.seq for r in store.read_records(1, 100)] == list(range(1, gone_base))
    finally:
        store.close()
