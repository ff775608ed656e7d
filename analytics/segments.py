"""An independent reader of the zmqueue segment format (docs/SEGMENT_FORMAT.md).

Written from the format document alone: it imports nothing from the host.
A segment file is a concatenation of blocks::

    header (44 bytes, little-endian)            payload (comp_len bytes)
    magic "ZMQB" | version u8 | codec u8 |      LZ4 block -> raw_len bytes =
    flags u16 | record_count u32 |              record table (88 bytes each)
    first_seq u64 | last_seq u64 | raw_len u32 | + heap (bodies, attribute blobs)
    comp_len u32 | payload_crc u32 | header_crc u32

Checksums are CRC32C. Reading policy (the analytics view, see docs/ANALYTICS.md):

- a block whose **header** fails (short, CRC, magic, version) ends the file:
  without a trusted ``comp_len`` the next block cannot be found;
- a block whose header is sound but whose **payload** fails (CRC, LZ4,
  seqs, heap bounds) is reported and skipped; the next block is still read.

Nothing is raised for bad data: bad blocks come back as :class:`BadBlock`.
Files are read block by block with ``pread``, never whole.

Decompression writes into a buffer from pyarrow's memory pool, which reuses
freed memory: ``lz4.block.decompress`` returns a fresh ``bytes`` for every
block, and at ~2 MB a block every page of it is a new page fault, which cost
~6x the decompression itself (1 GB/s instead of 7 GB/s).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import lz4.block
import numpy as np
import pyarrow as pa

MAGIC = b"ZMQB"
FORMAT_VERSION = 1
CODEC_LZ4 = 1
HEADER = struct.Struct("<4sBBHIQQIIII")
HEADER_BYTES = HEADER.size  # 44
RECORD_BYTES = 88
MAX_BLOCK_BYTES = 256 * 1024 * 1024  # a sanity bound on raw_len / comp_len

RECORD_DTYPE = np.dtype([
    ("type", "u1"), ("rec_version", "u1"), ("flags", "<u2"), ("body_len", "<u4"),
    ("epoch", "<u8"), ("seq", "<u8"), ("target_seq", "<u8"), ("message_id", "V16"),
    ("time_ms", "<i8"), ("visible_at_ms", "<i8"), ("group_hash", "<u8"),
    ("receive_count", "<u4"), ("attr_len", "<u4"), ("data_off", "<u4"), ("reserved", "<u4"),
])
assert RECORD_DTYPE.itemsize == RECORD_BYTES

RECORD_TYPES = {1: "MESSAGE", 2: "DELETE", 3: "VISIBILITY", 4: "DLQ_MOVE", 5: "PURGE", 6: "EPOCH"}


@dataclass(frozen=True)
class BlockHeader:
    offset: int
    record_count: int
    first_seq: int
    last_seq: int
    raw_len: int
    comp_len: int
    payload_crc: int

    @property
    def end(self) -> int:
        return self.offset + HEADER_BYTES + self.comp_len


@dataclass(frozen=True)
class Block:
    """A verified block: its record table (numpy, RECORD_DTYPE) and heap."""

    header: BlockHeader
    table: np.ndarray
    heap: bytes


@dataclass(frozen=True)
class BadBlock:
    """A block that failed verification; ``fatal`` means the rest of the file is unreachable."""

    offset: int
    reason: str
    fatal: bool


def _lz4_decompress_safe() -> Any:
    """liblz4's ``LZ4_decompress_safe`` (exported by python-lz4's extension), or None."""
    spec = importlib.util.find_spec("lz4.block._block")
    try:
        fn = ctypes.CDLL(spec.origin if spec and spec.origin else "liblz4.so.1").LZ4_decompress_safe
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_DECOMPRESS_SAFE = _lz4_decompress_safe()


def lz4_decompress(comp: bytes, raw_len: int) -> pa.Buffer | bytes:
    """LZ4-block-decompress ``comp`` to exactly ``raw_len`` bytes, or raise ValueError."""
    if _DECOMPRESS_SAFE is None:  # pragma: no cover - python-lz4 always exports it today
        try:
            raw = lz4.block.decompress(comp, uncompressed_size=raw_len)
        except lz4.block.LZ4BlockError as exc:
            raise ValueError(f"lz4 decompression failed: {exc}") from exc
        if len(raw) != raw_len:
            raise ValueError(f"decompressed {len(raw)} bytes, header says {raw_len}")
        return bytes(raw)
    out = pa.allocate_buffer(raw_len)
    got = _DECOMPRESS_SAFE(comp, out.address, len(comp), raw_len)
    if got < 0:
        raise ValueError("lz4 decompression failed: corrupt input")
    if got != raw_len:
        raise ValueError(f"decompressed {got} bytes, header says {raw_len}")
    return out


class HeaderError(Exception):
    pass


def parse_header(buf: bytes, offset: int) -> BlockHeader:
    """Decode and verify a 44-byte block header, or raise HeaderError."""
    if len(buf) < HEADER_BYTES:
        raise HeaderError(f"truncated header: {len(buf)} of {HEADER_BYTES} bytes")
    magic, version, codec, flags, count, first, last, raw_len, comp_len, pcrc, hcrc = HEADER.unpack(buf)
    if crc32c.crc32c(buf[:40]) != hcrc:
        raise HeaderError("header checksum mismatch")
    if magic != MAGIC:
        raise HeaderError(f"bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise HeaderError(f"unsupported format version {version}")
    if codec != CODEC_LZ4 or flags != 0:
        raise HeaderError(f"unsupported codec {codec} / flags {flags:#x} (encrypted or newer format?)")
    if count < 1 or last < first or last - first + 1 != count:
        raise HeaderError(f"inconsistent seqs {first}..{last} for {count} records")
    if raw_len > MAX_BLOCK_BYTES or comp_len > MAX_BLOCK_BYTES or raw_len < count * RECORD_BYTES:
        raise HeaderError(f"implausible lengths raw={raw_len} comp={comp_len}")
    return BlockHeader(offset, count, first, last, raw_len, comp_len, pcrc)


def decode_payload(header: BlockHeader, comp: bytes) -> Block:
    """Verify and decompress a payload, or raise ValueError with the reason."""
    if len(comp) < header.comp_len:
        raise ValueError(f"truncated payload: {len(comp)} of {header.comp_len} bytes")
    if crc32c.crc32c(comp) != header.payload_crc:
        raise ValueError("payload checksum mismatch")
    raw = lz4_decompress(comp, header.raw_len)
    n = header.record_count
    table = np.frombuffer(raw, dtype=RECORD_DTYPE, count=n)
    table.flags.writeable = False
    heap = memoryview(raw)[n * RECORD_BYTES:].tobytes()
    seqs = table["seq"]
    if int(seqs[0]) != header.first_seq or int(seqs[-1]) != header.last_seq or (
            n > 1 and not bool((seqs[1:] > seqs[:-1]).all())):
        raise ValueError("record seqs do not match the header")
    off, body, attr = table["data_off"], table["body_len"], table["attr_len"]
    # the sum of the maxima bounds every record's end; the exact check only when it does not fit
    if int(off.max()) + int(body.max()) + int(attr.max()) > len(heap) and int(
            (off.astype(np.int64) + body + attr).max()) > len(heap):
        raise ValueError("record points past the heap")
    return Block(header, table, heap)


GONE = ("segment file removed while the job ran (a running host's compaction removes a file "
        "once every message in it is consumed or expired, and a deleted queue's files go): its "
        "records were not read; run the job again to read the log as it is now")
"""The reason of the row for a file that was listed but is gone when read."""


def missing(last_seq: int, next_seq: int) -> str:
    """The reason of the row for a gap between a stream's segment files: the
    next file's first seq (its name) does not follow this file's last record."""
    return (f"the stream's next segment file starts at seq {next_seq}, this one ends at seq "
            f"{last_seq}: the records between are missing (a segment file lost or removed by hand; "
            "the engine's recovery ends the log here and drops the later files, "
            "docs/SEGMENT_FORMAT.md), or the log was cut while the job ran")


def file_size(path: Path | str) -> int:
    """The file's size; 0 when it is gone (removed since it was listed)."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def iter_blocks(path: Path | str, start: int = 0, end: int | None = None) -> Iterator[Block | BadBlock]:
    """Blocks of one segment file whose header starts in ``[start, end)``; a file
    that is gone yields one :data:`GONE` bad block."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield BadBlock(start, GONE, fatal=True)
        return
    try:
        size = os.fstat(fd).st_size
        stop = size if end is None else min(end, size)
        offset = start
        while offset < stop:
            try:
                header = parse_header(os.pread(fd, HEADER_BYTES, offset), offset)
            except HeaderError as exc:
                yield BadBlock(offset, str(exc), fatal=True)
                return
            try:
                yield decode_payload(header, os.pread(fd, header.comp_len, offset + HEADER_BYTES))
            except ValueError as exc:
                yield BadBlock(offset, str(exc), fatal=header.end > size)
                if header.end > size:
                    return
            offset = header.end
    finally:
        os.close(fd)


def block_offsets(path: Path | str) -> list[int]:
    """Offsets of the blocks reachable through sound headers (for splitting a file);
    none when the file is gone."""
    out: list[int] = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return out
    try:
        size = os.fstat(fd).st_size
        offset = 0
        while offset < size:
            try:
                header = parse_header(os.pread(fd, HEADER_BYTES, offset), offset)
            except HeaderError:
                break
            out.append(offset)
            offset = header.end
    finally:
        os.close(fd)
    return out
