"""Segment files: naming, the append-only writer, the block scanner and the index.

A partition directory holds ``<base_seq:020d>.seg`` files, ``base_seq`` being
the first seq of the first block in the file; files are a plain concatenation
of blocks (see :mod:`records`).  Only the newest file is ever written.

The sparse index (first seq, file, offset of every block) lives in memory and
is rebuilt by the recovery scan on open; there is no sidecar file to get out
of sync.  Lookup is a binary search, then blocks are read forward.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import mmap
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zmqueue.dataplane.storage.records import (
    HEADER_BYTES,
    BlockHeader,
    Table,
    decode_header,
    decode_payload,
)
from zmqueue.errors import CorruptSegment, InternalError
from zmqueue.numbers import digits

SUFFIX = ".seg"


def segment_name(base_seq: int) -> str:
    return f"{base_seq:020d}{SUFFIX}"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """(base_seq, path) of every well-named segment file, oldest first."""
    found = []
    for path in directory.iterdir():
        stem = path.name[: -len(SUFFIX)]
        base = digits(stem, 20) if path.name.endswith(SUFFIX) and len(stem) == 20 else None
        if base is not None:
            found.append((base, path))
    return sorted(found)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class ScannedBlock:
    offset: int
    header: BlockHeader
    table: Table
    heap: bytes


def scan_segment(path: Path, start_seq: int) -> Iterator[ScannedBlock | CorruptSegment]:
    """Yield the file's verified blocks; a bad block yields one error and stops.

    ``start_seq``: every block's first seq must be >= it (and increase).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield from _scan_mapped(path, data, size, start_seq)


def _scan_mapped(
    path: Path, data: mmap.mmap, size: int, start_seq: int
) -> Iterator[ScannedBlock | CorruptSegment]:
    offset, expect = 0, start_seq
    while offset < size:
        try:
            header = decode_header(data[offset : offset + HEADER_BYTES])
            end = offset + HEADER_BYTES + header.comp_len
            if end > size:
                raise CorruptSegment("block runs past the end of the file (torn write)")
            table, heap = decode_payload(header, data[offset + HEADER_BYTES : end])
            if header.first_seq < expect:
                raise CorruptSegment(f"seq {header.first_seq} not after {expect - 1}")
        except CorruptSegment as exc:
            exc.details.update(path=str(path), offset=offset)
            yield exc
            return
        yield ScannedBlock(offset, header, table, heap)
        offset, expect = end, header.last_seq + 1


class BlockIndex:
    """In-memory sparse index: one (first_seq, segment base, offset) per block.

    Three ``array("Q")`` columns: appending an entry (every commit) is three C
    appends, and lookup is a ``bisect`` on the first seqs."""

    def __init__(self) -> None:
        self._first = array("Q")
        self._base = array("Q")
        self._offset = array("Q")

    @property
    def count(self) -> int:
        return len(self._first)

    def add(self, first_seq: int, base: int, offset: int) -> None:
        self._first.append(first_seq)
        self._base.append(base)
        self._offset.append(offset)

    def find(self, seq: int) -> int:
        """Index of the block that may hold ``seq`` (last block with first <= seq)."""
        return max(bisect.bisect_right(self._first, seq) - 1, 0)

    def entry(self, i: int) -> tuple[int, int, int]:
        return self._first[i], self._base[i], self._offset[i]

    def blocks_of(self, base: int) -> range:
        """Index positions of segment ``base``'s blocks, oldest first."""
        return range(bisect.bisect_left(self._base, base), bisect.bisect_right(self._base, base))

    def drop_segment(self, base: int) -> None:
        # a segment's entries are one run: bases never decrease along the index
        lo, hi = bisect.bisect_left(self._base, base), bisect.bisect_right(self._base, base)
        del self._first[lo:hi], self._base[lo:hi], self._offset[lo:hi]


class BlockReader:
    """Reads verified blocks by index entry (pread on a few cached fds)."""

    def __init__(self, directory: Path, max_open: int = 8) -> None:
        self._dir = directory
        self._fds: dict[int, int] = {}
        self._max_open = max_open

    def read(self, base: int, offset: int) -> tuple[BlockHeader, Table, bytes]:
        fd = self._fd(base)
        header = decode_header(os.pread(fd, HEADER_BYTES, offset))
        comp = os.pread(fd, header.comp_len, offset + HEADER_BYTES)
        table, heap = decode_payload(header, comp)
        return header, table, heap

    def forget(self, base: int) -> None:
        fd = self._fds.pop(base, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for base in list(self._fds):
            self.forget(base)

    def _fd(self, base: int) -> int:
        fd = self._fds.get(base)
        if fd is None:
            if len(self._fds) >= self._max_open:
                self.forget(next(iter(self._fds)))
            fd = os.open(self._dir / segment_name(base), os.O_RDONLY)
            self._fds[base] = fd
        return fd


class SegmentWriter:
    """The active segment: append whole blocks, truncate back on failure."""

    def __init__(self, path: Path, base: int) -> None:
        self.path = path
        self.base = base
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self.size = os.lseek(self.fd, 0, os.SEEK_END)

    def write_block(self, head: bytes, payload: bytes = b"") -> int:
        """Append ``head + payload`` (one ``pwritev``); return the offset.
        On error, cut back and re-raise."""
        offset = self.size
        total = len(head) + len(payload)
        try:
            done = os.pwritev(self.fd, (head, payload), offset)
            if done < total:  # short write (file size limit, signal): finish it piecewise
                view = memoryview(head + payload)
                while done < total:
                    done += os.pwrite(self.fd, view[done:], offset + done)
        except OSError:
            self._cut_back(offset)
            raise
        self.size = offset + total
        return offset

    def _cut_back(self, offset: int) -> None:
        with contextlib.suppress(OSError):  # if this fails too, recovery cuts the tail
            os.ftruncate(self.fd, offset)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def cut_log(directory: Path, base: int, offset: int) -> None:
    """Cut a closed log at block ``offset`` of segment ``base``: that file is
    truncated there (removed if nothing is left before it) and every later
    segment is deleted, newest first (a crash meanwhile leaves a shorter log,
    never a hole); the files and the directory are fsynced."""
    for seg_base, path in reversed(list_segments(directory)):
        if seg_base > base or (seg_base == base and offset == 0):
            path.unlink()
        elif seg_base == base:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, offset)
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(directory)


def lock_directory(directory: Path) -> int:
    fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise InternalError(
            f"partition directory {directory} is already open by another store", path=str(directory)
        ) from exc
    return fd
