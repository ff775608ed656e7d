"""Recovery scan: verify every block of every segment, cut what cannot be trusted.

Crash policy (also in docs/SEGMENT_FORMAT.md): files are scanned oldest first.
At the first block that fails any check (short or bad header, header or
payload CRC32C mismatch, LZ4 error, seqs not increasing, block past EOF;
or a file whose first seq does not follow the file before it) the
file is truncated at that block's offset and every later segment file is
deleted (those first, newest first, then the cut, all fsynced: a crash
meanwhile leaves a shorter log, never one with a hole; ``segment.cut_log``,
which a replica's cut after divergence uses too): the log is a single
ordered stream, so nothing after a hole can be replayed.  A torn tail
after a crash is the common case; a bad block in the middle of a file (bit
rot) is handled the same way and listed in ``corrupt_blocks``.  Empty files
are removed.  Nothing here raises on garbage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from zmqueue.dataplane.storage.records import HEADER_BYTES, RecordType, Table
from zmqueue.dataplane.storage.segment import ScannedBlock, cut_log, list_segments, scan_segment
from zmqueue.errors import CorruptSegment


@dataclass
class CorruptBlock:
    path: str
    offset: int
    reason: str


@dataclass
class RecoveryReport:
    segments_scanned: int = 0
    blocks: int = 0
    records: int = 0
    bytes: int = 0  # bytes of verified blocks
    truncated_bytes: int = 0  # bytes cut (torn tail, corrupt block onward, later files)
    corrupt_blocks: list[CorruptBlock] = field(default_factory=list)
    removed_segments: list[str] = field(default_factory=list)
    duration_ms: float = 0.0


@dataclass
class SegmentInfo:
    base: int
    size: int
    last_seq: int
    first_ms: int = 0
    """``time_ms`` of its first record, or when the writer started it: its
    age, for rolling by age (``StorageConfig.segment_roll_ms``)."""
    last_message_ms: int = 0
    """The newest ``time_ms`` of its MESSAGE records (0: none): a FIFO
    partition keeps the segment while that is within the dedup window
    (``StorageConfig.keep_messages_ms``)."""


OnBlock = Callable[[int, ScannedBlock], None]


def newest_message_ms(table: Table) -> int:
    """The newest ``time_ms`` of the table's MESSAGE records, 0 if it has none."""
    times = table["time_ms"][table["type"] == RecordType.MESSAGE]
    return int(times.max()) if len(times) else 0


def recover_directory(directory: Path, on_block: OnBlock) -> tuple[RecoveryReport, list[SegmentInfo]]:
    """Scan, verify and cut; call ``on_block(base, block)`` for each good block."""
    started = time.perf_counter()
    report = RecoveryReport()
    segments: list[SegmentInfo] = []
    files = list_segments(directory)
    last_seq = 0
    for i, (base, path) in enumerate(files):
        report.segments_scanned += 1
        info: SegmentInfo | None = None
        cut_at: int | None = 0
        if segments and base != last_seq + 1:  # a file is missing: nothing after it is replayed
            reason = f"segment starts at seq {base}, the log before it ends at {last_seq}"
            report.corrupt_blocks.append(CorruptBlock(str(path), 0, reason))
            report.truncated_bytes += path.stat().st_size
        else:
            info, cut_at = _scan_one(base, path, last_seq, on_block, report)
        if info is not None:
            segments.append(info)
            last_seq = info.last_seq
        if cut_at is not None:
            if cut_at == 0:
                report.removed_segments.append(path.name)
            for _, later in files[i + 1 :]:
                report.truncated_bytes += later.stat().st_size
                report.removed_segments.append(later.name)
            cut_log(directory, base, cut_at)  # (later files first: a crash meanwhile leaves no hole)
            break
    report.duration_ms = (time.perf_counter() - started) * 1000
    return report, segments


def _scan_one(
    base: int, path: Path, after_seq: int, on_block: OnBlock, report: RecoveryReport
) -> tuple[SegmentInfo | None, int | None]:
    """Scan one file; return (its info, None if nothing good is left in it;
    the offset to cut the log at, None if the file is whole). An empty file
    is removed here."""
    good_end, last, first_ms, message_ms = 0, after_seq, 0, 0
    cut = False
    for item in scan_segment(path, after_seq + 1):
        if isinstance(item, CorruptSegment):
            report.corrupt_blocks.append(CorruptBlock(str(path), good_end, item.message))
            cut = True
            break
        if good_end == 0 and item.header.first_seq != base:
            reason = f"first block seq {item.header.first_seq} != file base {base}"
            report.corrupt_blocks.append(CorruptBlock(str(path), 0, reason))
            cut = True
            break
        if good_end == 0:
            first_ms = int(item.table["time_ms"][0])
        on_block(base, item)
        message_ms = max(message_ms, newest_message_ms(item.table))
        report.blocks += 1
        report.records += item.header.record_count
        good_end = item.offset + HEADER_BYTES + item.header.comp_len
        last = item.header.last_seq
    size = path.stat().st_size
    if good_end < size:
        report.truncated_bytes += size - good_end
    if good_end == 0 and not cut:
        report.removed_segments.append(path.name)
        path.unlink()
        return None, None
    report.bytes += good_end
    info = SegmentInfo(base, good_end, last, first_ms, message_ms) if good_end else None
    return info, (good_end if cut else None)
