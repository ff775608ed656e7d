"""Record types and the block codec: pure functions, no file I/O.

A block is ``HEADER (44 bytes) + LZ4 payload``; the raw payload is a fixed-size
record table (``record_count`` x 88 bytes, :data:`RECORD_DTYPE`) followed by a
heap holding message bodies and attribute blobs.  All integers little-endian.

Block header::

    off size field
      0   4  magic          b"ZMQB"
      4   1  format_version 1
      5   1  codec          1 = lz4.block, raw (no size prefix, no frame)
      6   2  flags          0 (reserved)
      8   4  record_count   u32, >= 1
     12   8  first_seq      u64, seq of record 0
     20   8  last_seq       u64, seq of the last record
     28   4  raw_len        u32, decompressed payload length
     32   4  comp_len       u32, bytes of compressed payload following the header
     36   4  payload_crc    u32, CRC32C (Castagnoli) of the compressed payload
     40   4  header_crc     u32, CRC32C of header bytes 0..39

Record (88 bytes, one per record, fields unused by a type are zero)::

    off size field
      0   1  type           RecordType
      1   1  rec_version    1
      2   2  flags          FLAG_SEAL_KNOWN | FLAG_SEALED (see there); 0 from the engine alone
      4   4  body_len       u32 (MESSAGE)
      8   8  epoch          u64, leadership term that wrote it (0: the engine alone)
     16   8  seq            u64, strictly increasing over the whole partition log
     24   8  target_seq     u64, message referenced (DELETE, VISIBILITY, DLQ_MOVE);
                            PURGE: highest seq purged; EPOCH: 0
     32  16  message_id     16 bytes (MESSAGE; copied into VISIBILITY/DELETE/DLQ_MOVE)
     48   8  time_ms        i64, MESSAGE: enqueue time; others: time of the action
     56   8  visible_at_ms  i64, MESSAGE: first visible time; VISIBILITY: new deadline
     64   8  group_hash     u64 (MESSAGE)
     72   4  receive_count  u32, VISIBILITY: count after the receive; DELETE: receipt's
     76   4  attr_len       u32 (MESSAGE)
     80   4  data_off       u32, offset of the body in the heap; attributes follow it
     84   4  reserved       0
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import crc32c
import lz4.block
import numpy as np
import numpy.typing as npt

from zmqueue.errors import CorruptSegment

MAGIC = b"ZMQB"
FORMAT_VERSION = 1
RECORD_VERSION = 1
FLAG_SEALED = 0x1
"""Record flag: the queue seals payloads at rest (a MESSAGE's body and blob
are sealed unless empty)."""
FLAG_SEAL_KNOWN = 0x2
"""Record flag: FLAG_SEALED says whether the queue seals (set on every record
a host writes since the thirty-fourth session; older records have flags 0,
and a reader guesses sealing from a payload's first byte)."""
CODEC_LZ4_BLOCK = 1
HEADER = struct.Struct("<4sBBHIQQIII")  # without header_crc
HEADER_BYTES = HEADER.size + 4
_CRC = struct.Struct("<I")
MAX_BLOCK_RAW = 1 << 30
BLOCK_TARGET_BYTES = 8 << 20
"""Payload bytes a block should hold at most, plus one request's worth: a host
commits a stream early once its staged records hold this many, and a
replication or catch-up frame carries blocks up to this many bytes (at least
one block), so frames stay far below a peer's frame limit however many
large messages arrive in one loop pass."""


class RecordType(IntEnum):
    """Record type byte.  Values are stable; new types are only appended."""

    MESSAGE = 1
    DELETE = 2
    VISIBILITY = 3
    DLQ_MOVE = 4
    PURGE = 5
    EPOCH = 6
    """A writer's first record of its term (no message): written when a host
    takes over a stream whose log is not empty, so that its log's position,
    (epoch of the last record, seq), is of its own term before it
    acknowledges anything (Raft's no-op entry; docs/REPLICATION.md)."""


RECORD_DTYPE = np.dtype(
    [
        ("type", "u1"),
        ("rec_version", "u1"),
        ("flags", "<u2"),
        ("body_len", "<u4"),
        ("epoch", "<u8"),
        ("seq", "<u8"),
        ("target_seq", "<u8"),
        ("message_id", "V16"),
        ("time_ms", "<i8"),
        ("visible_at_ms", "<i8"),
        ("group_hash", "<u8"),
        ("receive_count", "<u4"),
        ("attr_len", "<u4"),
        ("data_off", "<u4"),
        ("reserved", "<u4"),
    ]
)
assert RECORD_DTYPE.itemsize == 88

Table = npt.NDArray[np.void]
Buffer = bytes | bytearray | memoryview  # contiguous bytes (lz4 and crc32c take any)
RECORD_BYTES = RECORD_DTYPE.itemsize
RECORD_STRUCT = struct.Struct("<BBHIQQQ16sqqQIIII")
"""One record as a struct (for writing a single row without numpy calls)."""
assert RECORD_STRUCT.size == RECORD_BYTES
WORDS = RECORD_BYTES // 8  # 11 u64 words per record
_W32_BODY_LEN, _W32_ATTR_LEN, _W32_DATA_OFF = 1, 19, 20  # u32 word indexes of these columns in a row
assert [RECORD_DTYPE.fields[f][1] // 4 for f in ("body_len", "attr_len", "data_off")] == [1, 19, 20]  # type: ignore[index]


class RecordBuffer:
    """The raw payload of one block under construction, in one numpy byte array:
    room for ``rows`` records at the front (with column views of their u64 / u32
    / i64 words) and, behind the rows in use, the heap (copied in at commit), so
    the whole payload is one contiguous buffer that LZ4 compresses in place."""

    __slots__ = ("i64", "ids", "mem", "raw", "rows", "table", "times", "w32", "w64")

    def __init__(self, rows: int, nbytes: int = 0) -> None:
        self.raw = np.zeros(max(nbytes, rows * RECORD_BYTES), np.uint8)
        self.mem = self.raw.data  # writable, format "B": struct.pack_into, heap copies
        self.rows = rows
        self.table: Table = self.raw[: rows * RECORD_BYTES].view(RECORD_DTYPE)
        self.w64: npt.NDArray[np.uint64] = self.table.view(np.uint64).reshape(rows, WORDS)
        self.w32: npt.NDArray[np.uint32] = self.w64.view(np.uint32)
        self.i64: npt.NDArray[np.int64] = self.w64.view(np.int64)
        self.ids: npt.NDArray[np.void] = self.table["message_id"]
        self.times: npt.NDArray[np.int64] = self.i64[:, 6:8]  # time_ms, visible_at_ms


@dataclass(frozen=True)
class BlockHeader:
    record_count: int
    first_seq: int
    last_seq: int
    raw_len: int
    comp_len: int
    payload_crc: int


def new_table(count: int) -> Table:
    """A zeroed record table with the version byte set."""
    table = np.zeros(count, RECORD_DTYPE)
    table["rec_version"] = RECORD_VERSION
    return table


_REF_TEMPLATES: dict[int, npt.NDArray[np.uint64]] = {}
_REF_ARANGE = np.arange(1024, dtype=np.uint64)


def ref_table(rtype: RecordType, targets: npt.ArrayLike, first_seq: int, epoch: int, now_ms: int) -> Table:
    """Records of a non-message type, one per target, seqs from ``first_seq``.

    Built from a cached template (type and version preset) with whole-column
    writes on the u64 words of the records: the receive path calls this per call.
    """
    target_arr = np.asarray(targets, dtype=np.uint64)
    n = len(target_arr)
    template = _REF_TEMPLATES.get(rtype)
    if template is None or len(template) < n:
        size = max(n, 64)
        table = new_table(size)
        table["type"] = rtype
        template = _REF_TEMPLATES[rtype] = table.view(np.uint64).reshape(size, 11)
    words = template[:n].copy()
    if epoch:
        words[:, 1] = epoch
    if n <= len(_REF_ARANGE):
        np.add(_REF_ARANGE[:n], first_seq, out=words[:, 2])
    else:
        words[:, 2] = np.arange(first_seq, first_seq + n, dtype=np.uint64)
    words[:, 3] = target_arr
    words.view(np.int64)[:, 6] = now_ms
    table_out: Table = words.view(RECORD_DTYPE).reshape(n)
    return table_out


def encode_block(table: Table, heap: bytes) -> bytes:
    """Header + compressed payload for one block; ``table`` must be non-empty."""
    count = len(table)
    assert count > 0
    raw = table.tobytes() + heap if heap else table.tobytes()
    head, comp = encode_payload(raw, count, int(table["seq"][0]), int(table["seq"][-1]))
    return head + comp


def encode_payload(raw: Buffer, count: int, first_seq: int, last_seq: int) -> tuple[bytes, bytes]:
    """(header, compressed payload) of the block whose raw payload (record table
    then heap, contiguous) is ``raw``; written with one ``pwritev`` of both."""
    comp = lz4.block.compress(raw, store_size=False)
    head = HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        CODEC_LZ4_BLOCK,
        0,
        count,
        first_seq,
        last_seq,
        len(raw),
        len(comp),
        crc32c.crc32c(comp),
    )
    return head + _CRC.pack(crc32c.crc32c(head)), comp


def is_zero_header(buf: bytes) -> bool:
    """True when ``buf`` (a would-be header) is all zero bytes."""
    return not any(buf)


def decode_header(buf: bytes) -> BlockHeader:
    """Parse and verify a block header; raise :class:`CorruptSegment`."""
    if len(buf) < HEADER_BYTES:
        raise CorruptSegment(f"short header: {len(buf)} of {HEADER_BYTES} bytes")
    (header_crc,) = struct.unpack_from("<I", buf, HEADER.size)
    if crc32c.crc32c(buf[: HEADER.size]) != header_crc:
        raise CorruptSegment("header checksum mismatch")
    magic, version, codec, _flags, count, first, last, raw_len, comp_len, pcrc = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or version != FORMAT_VERSION or codec != CODEC_LZ4_BLOCK:
        raise CorruptSegment(f"bad magic/version/codec {magic!r}/{version}/{codec}")
    if count < 1 or last < first or raw_len < count * RECORD_DTYPE.itemsize:
        raise CorruptSegment(f"inconsistent header: count={count} raw_len={raw_len}")
    if raw_len > MAX_BLOCK_RAW or comp_len > MAX_BLOCK_RAW:
        raise CorruptSegment(f"block too large: raw_len={raw_len} comp_len={comp_len}")
    return BlockHeader(count, first, last, raw_len, comp_len, pcrc)


def decode_payload(header: BlockHeader, comp: bytes) -> tuple[Table, bytes]:
    """Verify and decompress a payload into (record table, heap)."""
    if len(comp) != header.comp_len:
        raise CorruptSegment(f"short payload: {len(comp)} of {header.comp_len} bytes")
    if crc32c.crc32c(comp) != header.payload_crc:
        raise CorruptSegment("payload checksum mismatch")
    try:
        raw = lz4.block.decompress(comp, uncompressed_size=header.raw_len)
    except lz4.block.LZ4BlockError as exc:
        raise CorruptSegment(f"lz4 decompression failed: {exc}") from exc
    if len(raw) != header.raw_len:
        raise CorruptSegment("decompressed length mismatch")
    table_len = header.record_count * RECORD_DTYPE.itemsize
    table = np.frombuffer(raw, RECORD_DTYPE, header.record_count)
    heap = raw[table_len:]
    _check_table(header, table, len(heap))
    return table, heap


def _check_table(header: BlockHeader, table: Table, heap_len: int) -> None:
    # (every block read is checked, a page-in reads many: few numpy calls,
    # the length columns read as u32 words of the rows)
    seqs = table["seq"]
    if int(seqs[0]) != header.first_seq or int(seqs[-1]) != header.last_seq:
        raise CorruptSegment("record seqs disagree with the header")
    if len(seqs) > 1 and not (seqs[1:] > seqs[:-1]).all():
        raise CorruptSegment("record seqs not strictly increasing")
    w32 = table.view(np.uint32).reshape(len(table), RECORD_BYTES // 4)
    ends = w32[:, _W32_DATA_OFF].astype(np.int64)
    ends += w32[:, _W32_BODY_LEN]
    ends += w32[:, _W32_ATTR_LEN]
    if int(ends.max()) > heap_len:
        raise CorruptSegment("record data beyond the heap")
    types = table["type"]
    if int(types.min()) < RecordType.MESSAGE or int(types.max()) > max(RecordType):
        raise CorruptSegment("unknown record type")
