"""The append path: new messages as columns -> MESSAGE records + heap.

Pure functions, no I/O.  The records (layout in :mod:`records`) are written by
:func:`fill` straight into the staging buffer (:class:`RecordBuffer`) with a
handful of whole-column numpy operations, never per message: a cached
template holds the constant bytes (type, version, zeros), the 88-byte records
are viewed as rows of 22 little-endian u32 / 11 u64 words and each varying
field is written as one strided column.  The heap is one ``b"".join``: bodies
back to back, or ``body, attributes`` pairs when any message has attributes.

The per-message Python work left is ``len()`` of each body (and attribute
blob) and the join; everything else is O(1) numpy calls per batch.  When all
bodies of a batch have the same length (and there are no attributes) the
lengths are one scalar and the template used already holds ``body_len`` and
``data_off`` (rebuilt when the length changes), so the batch costs a copy of
the template plus the seq, id and time columns.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from operator import attrgetter
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from zmqueue.dataplane.storage.model import MESSAGE_ID_BYTES, NewMessage
from zmqueue.dataplane.storage.records import (
    RECORD_BYTES,
    RECORD_DTYPE,
    RECORD_STRUCT,
    RECORD_VERSION,
    RecordBuffer,
    RecordType,
    Table,
    new_table,
)
from zmqueue.errors import InvalidParameter

U32Array = npt.NDArray[np.uint32]
U64Array = npt.NDArray[np.uint64]

# word positions of the record fields (records.py layout; asserted below)
_W32_BODY_LEN, _W32_ATTR_LEN, _W32_DATA_OFF = 1, 19, 20
_W64_EPOCH, _W64_SEQ, _W64_ID, _W64_TIME, _W64_VISIBLE, _W64_GROUP = 1, 2, 4, 6, 7, 8
_ID16 = np.dtype("V16")
assert array("I").itemsize == 4  # body lengths go through array("I") into u32
assert RECORD_DTYPE.fields is not None
for _name, _word, _size in (
    ("body_len", _W32_BODY_LEN, 4),
    ("attr_len", _W32_ATTR_LEN, 4),
    ("data_off", _W32_DATA_OFF, 4),
    ("epoch", _W64_EPOCH, 8),
    ("seq", _W64_SEQ, 8),
    ("message_id", _W64_ID, 8),
    ("time_ms", _W64_TIME, 8),
    ("visible_at_ms", _W64_VISIBLE, 8),
    ("group_hash", _W64_GROUP, 8),
):
    assert RECORD_DTYPE.fields[_name][1] == _word * _size, _name

_ID, _BODY, _ATTRS = attrgetter("message_id"), attrgetter("body"), attrgetter("attributes")
_DELAY, _GROUP = attrgetter("delay_ms"), attrgetter("group_hash")


class Packed(NamedTuple):
    """Validated columns of one batch, ready for :func:`message_table`."""

    n: int
    message_ids: bytes  # 16 * count
    body_len: U32Array | int  # int: every body has this length (and no attributes)
    attr_len: U32Array | None  # None: no message has attributes
    heap: bytes
    group_hashes: U64Array | None  # None: all 0
    delay_ms: npt.NDArray[np.int64] | int


class _Template:
    """Words of a zeroed MESSAGE table of the largest size seen, copied per batch
    (a plain u64 copy is a memcpy; copying the structured dtype is not), and the
    same with ``body_len`` and ``data_off`` filled in for one body length.

    Shared by every store (read-only for them); each cache is one attribute
    holding an immutable tuple, so a rebuild by another thread is atomic."""

    plain: tuple[U64Array, U64Array, memoryview] = (
        np.zeros((0, 11), np.uint64),
        np.zeros(0, np.uint64),
        memoryview(b""),
    )
    uniform: tuple[int, int, memoryview] = (-1, 0, memoryview(b""))  # body_len, rows, bytes

    @classmethod
    def take(cls, n: int) -> tuple[U64Array, U64Array, memoryview]:
        """(template words, arange, the words as bytes) of at least ``n`` rows."""
        words, arange, data = cls.plain
        if n > len(words):
            size = max(n, 2 * len(words), 256)
            table = new_table(size)
            table["type"] = RecordType.MESSAGE
            words = table.view(np.uint64).reshape(size, 11)
            arange = np.arange(size, dtype=np.uint64)
            data = table.view(np.uint8).data
            cls.plain = (words, arange, data)
        return words, arange, data

    @classmethod
    def take_uniform(cls, n: int, body_len: int) -> memoryview:
        """Bytes of a template of at least ``n`` rows with bodies of ``body_len``
        bytes back to back (a memoryview: copied with one slice assignment)."""
        length, rows, data = cls.uniform
        if length != body_len or n > rows:
            size = max(n, rows, 256)
            plain, arange, _ = cls.take(size)
            words = plain[:size].copy()
            w32 = words.view(np.uint32)
            w32[:, _W32_BODY_LEN] = body_len
            w32[:, _W32_DATA_OFF] = arange[:size] * np.uint64(body_len)  # rows past a real batch may wrap
            data = words.reshape(-1).view(np.uint8).data
            cls.uniform = (body_len, size, data)
        return data


def first_scalars(batch: Packed) -> tuple[int, int, int, int]:
    """(body_len, attr_len, group_hash, delay_ms) of the batch's first
    message as ints: what :func:`fill` and ``Ring.insert_packed`` write for a
    single message with one struct each instead of numpy column writes (its
    body, then its attributes, start the heap)."""
    body_len, delay = batch.body_len, batch.delay_ms
    return (body_len if isinstance(body_len, int) else int(body_len[0]),
            0 if batch.attr_len is None else int(batch.attr_len[0]),
            0 if batch.group_hashes is None else int(batch.group_hashes[0]),
            delay if isinstance(delay, int) else int(delay[0]))


def pack(
    bodies: Sequence[bytes],
    message_ids: bytes | None,
    attributes: Sequence[bytes] | None,
    group_hashes: npt.ArrayLike | None,
    delay_ms: npt.ArrayLike | int,
) -> Packed:
    """Validate the columns and join the heap; raise :class:`InvalidParameter`."""
    n = len(bodies)
    if message_ids is None:
        message_ids = os.urandom(MESSAGE_ID_BYTES * n)
    elif len(message_ids) != MESSAGE_ID_BYTES * n:
        raise InvalidParameter(
            f"message_ids must be {MESSAGE_ID_BYTES} bytes per body ({MESSAGE_ID_BYTES * n}), "
            f"got {len(message_ids)}",
            field="message_id",
        )
    attr_len: U32Array | None = None
    body_len: U32Array | int
    heap: bytes
    if attributes is not None and any(attributes):
        _check_column("attributes", len(attributes), n)
        body_len = np.fromiter(map(len, bodies), np.uint32, n)
        attr_len = np.fromiter(map(len, attributes), np.uint32, n)
        pairs: list[bytes] = [b""] * (2 * n)
        pairs[0::2], pairs[1::2] = bodies, attributes
        heap = b"".join(pairs)
    else:
        lens = [*map(len, bodies)]
        first = lens[0] if n else 0
        body_len = first if lens.count(first) == n else np.frombuffer(array("I", lens), np.uint32)
        heap = b"".join(bodies)
    groups = None if group_hashes is None else _groups(group_hashes, n)
    delays = delay_ms if isinstance(delay_ms, int) else _delays(delay_ms, n)
    return Packed(n, bytes(message_ids), body_len, attr_len, heap, groups, delays)


def _check_column(name: str, got: int, n: int) -> None:
    if got != n:
        raise InvalidParameter(f"{name} must have one entry per body ({n}), got {got}", field=name)


def _groups(group_hashes: npt.ArrayLike | None, n: int) -> U64Array | None:
    if group_hashes is None:
        return None
    groups = np.asarray(group_hashes, np.uint64).reshape(-1)
    _check_column("group_hashes", len(groups), n)
    return groups if groups.any() else None


def _delays(delay_ms: npt.ArrayLike | int, n: int) -> npt.NDArray[np.int64] | int:
    if isinstance(delay_ms, int):
        return delay_ms
    delays = np.asarray(delay_ms, np.int64).reshape(-1)
    _check_column("delay_ms", len(delays), n)
    return delays if delays.any() else 0


def columns_of(messages: Sequence[NewMessage]) -> Packed:
    """The object API (:class:`NewMessage` list) as columns."""
    groups = list(map(_GROUP, messages))
    delays = list(map(_DELAY, messages))
    return pack(
        list(map(_BODY, messages)),
        b"".join(map(_ID, messages)),
        list(map(_ATTRS, messages)),
        groups if any(groups) else None,
        delays if any(delays) else 0,
    )


def message_table(batch: Packed, seq0: int, epoch: int, now_ms: int) -> Table:
    """The MESSAGE records of ``batch`` with seqs ``seq0 ..``; data_off from 0."""
    buf = RecordBuffer(batch.n)
    fill(buf, 0, batch, seq0, epoch, now_ms, 0)
    return buf.table


def fill(
    buf: RecordBuffer, row: int, batch: Packed, seq0: int, epoch: int, now_ms: int, heap_base: int,
    flags: int = 0,
) -> None:
    """Write the MESSAGE records of ``batch`` into rows ``row ..`` of ``buf``,
    seqs from ``seq0``, ``data_off`` from ``heap_base``, record ``flags``."""
    n = batch.n
    body_len = batch.body_len
    delay = batch.delay_ms
    if n == 1:  # a single send: one struct write instead of ~10 numpy calls
        blen, alen, group, dly = first_scalars(batch)
        RECORD_STRUCT.pack_into(buf.mem, row * RECORD_BYTES, RecordType.MESSAGE, RECORD_VERSION, flags,
                                blen, epoch, seq0, 0, batch.message_ids, now_ms, now_ms + dly,
                                group, 0, alen, heap_base, 0)
        return
    end = row + n
    w64 = buf.w64[row:end]
    if isinstance(body_len, int):
        buf.mem[row * RECORD_BYTES : end * RECORD_BYTES] = _Template.take_uniform(n, body_len)[
            : n * RECORD_BYTES
        ]
        arange = _Template.plain[1]
        if heap_base:
            buf.w32[row:end, _W32_DATA_OFF] += np.uint32(heap_base)
    else:
        _, arange, data = _Template.take(n)
        buf.mem[row * RECORD_BYTES : end * RECORD_BYTES] = data[: n * RECORD_BYTES]
        w32 = buf.w32[row:end]
        w32[:, _W32_BODY_LEN] = body_len
        lens = body_len
        if batch.attr_len is not None:
            w32[:, _W32_ATTR_LEN] = batch.attr_len
            lens = lens + batch.attr_len
        offs = w32[:, _W32_DATA_OFF]
        offs[0] = heap_base
        if n > 1:  # u32 in, u32 out: no casting loop (cumsum would accumulate in u64)
            np.add.accumulate(lens[:-1], out=offs[1:])
            if heap_base:
                offs[1:] += np.uint32(heap_base)
    if epoch:
        w64[:, _W64_EPOCH] = epoch
    if flags:
        w64[:, 0] |= np.uint64(flags << 16)  # (type, rec_version, flags, body_len: word 0)
    np.add(arange[:n], seq0, out=w64[:, _W64_SEQ])
    buf.ids[row:end] = np.frombuffer(batch.message_ids, _ID16)
    if isinstance(delay, int):
        if delay:
            times = buf.i64[row:end]
            times[:, _W64_TIME] = now_ms
            times[:, _W64_VISIBLE] = now_ms + delay
        else:
            buf.times[row:end] = now_ms
    else:
        times = buf.i64[row:end]
        times[:, _W64_TIME] = now_ms
        times[:, _W64_VISIBLE] = delay + now_ms
    if batch.group_hashes is not None:
        w64[:, _W64_GROUP] = batch.group_hashes
