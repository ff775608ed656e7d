"""The storage side of replication: committed records out as raw record
tables, and a replica's log extended with a writer's records verbatim.

Records travel as (table bytes, heap bytes) pairs: the same 88-byte rows and
payload heap as inside a block (docs/SEGMENT_FORMAT.md), so a replica stores
exactly what its writer stored (same seq, epoch and times) without per-record
Python objects. :func:`validate` checks untrusted tables before they touch a
store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from zmqueue.dataplane.storage import replay
from zmqueue.dataplane.storage.records import BLOCK_TARGET_BYTES, RECORD_DTYPE, RecordType, Table
from zmqueue.dataplane.storage.recovery import newest_message_ms
from zmqueue.dataplane.storage.segment import cut_log
from zmqueue.errors import InvalidParameter

if TYPE_CHECKING:
    from zmqueue.dataplane.storage.store import PartitionStore

Chunk = tuple[Table, bytes]

_MESSAGE = int(RecordType.MESSAGE)
_EPOCH = int(RecordType.EPOCH)
_KNOWN_TYPE = np.zeros(256, dtype=bool)
_KNOWN_TYPE[[int(t) for t in RecordType]] = True
"""Lookup table: record type byte -> known (cheaper than np.isin per chunk)."""


def read_chunks(store: PartitionStore, from_seq: int, max_records: int,
                max_bytes: int = BLOCK_TARGET_BYTES) -> list[Chunk]:
    """Committed rows with seq >= ``from_seq``, block by block (each with its
    heap), until ``max_records`` rows or ``max_bytes`` bytes (always at least
    one block: what one frame to a replica carries)."""
    last = store.last_block
    if last is not None and int(last[0]["seq"][0]) == from_seq and len(last[0]) <= max_records:
        return [last]  # the block just committed: the common case when publishing
    out: list[Chunk] = []
    n = size = 0
    i = store.index.find(from_seq)
    while i < store.index.count and n < max_records and (not out or size < max_bytes):
        _, base, offset = store.index.entry(i)
        _, table, heap = store.reader.read(base, offset)
        rows = table[table["seq"] >= from_seq][: max_records - n]
        if len(rows):
            if out and size + rows.nbytes + len(heap) > max_bytes:
                break
            out.append((rows, heap))
            n += len(rows)
            size += rows.nbytes + len(heap)
        i += 1
    return out


def validate(table_bytes: bytes, heap: bytes) -> Table:
    """A record table from the wire, checked: whole rows, known types,
    contiguous seqs, payloads inside the heap.

    Returns a read-only view of ``table_bytes`` (no copy: :func:`apply_chunk`
    copies the rows it keeps into the ring and the staging buffer)."""
    n, rest = divmod(len(table_bytes), RECORD_DTYPE.itemsize)
    if n == 0 or rest:
        raise InvalidParameter("replicated table is not whole records")
    table = np.frombuffer(table_bytes, RECORD_DTYPE)
    if n <= replay.SMALL_CHUNK:
        _validate_small(table.tolist(), len(heap))
        return table
    seqs = table["seq"]
    if int(seqs[-1]) - int(seqs[0]) != n - 1 or (n > 2 and not (np.diff(seqs) == 1).all()):
        raise InvalidParameter("replicated records are not contiguous")
    types = table["type"]
    if (types == _MESSAGE).all():  # a batch of sends: no per-type masks
        ends = table["data_off"].astype(np.int64) + table["body_len"] + table["attr_len"]
    else:
        if not _KNOWN_TYPE[types].all():
            raise InvalidParameter("replicated record of unknown type")
        msg = types == _MESSAGE
        ends = table["data_off"][msg].astype(np.int64) + table["body_len"][msg] + table["attr_len"][msg]
    if len(ends) and int(ends.max()) > len(heap):
        raise InvalidParameter("replicated payload outside its heap")
    return table


def _validate_small(recs: list[tuple[Any, ...]], heap_len: int) -> None:
    """:func:`validate` of a few records, on Python scalars."""
    first = recs[0][replay.F_SEQ]
    for j, r in enumerate(recs):
        if r[replay.F_SEQ] != first + j:
            raise InvalidParameter("replicated records are not contiguous")
        kind = r[replay.F_TYPE]
        if kind == _MESSAGE:
            if r[replay.F_DATA_OFF] + r[replay.F_BODY_LEN] + r[replay.F_ATTR_LEN] > heap_len:
                raise InvalidParameter("replicated payload outside its heap")
        elif not _KNOWN_TYPE[kind]:
            raise InvalidParameter("replicated record of unknown type")


def apply_chunk(store: PartitionStore, table: Table, heap: bytes) -> int:
    """Append a writer's rows (those after our last seq; ``table`` as :func:`validate`
    returns it, seqs contiguous) to this replica;
    staged until commit(). Returns how many rows were applied. The first new
    row must follow our last seq, except in an empty store (a fresh replica
    may start at the writer's first retained record)."""
    if len(table) <= replay.SMALL_CHUNK:
        return _apply_small(store, table, heap)
    last = store.last_seq
    seqs = table["seq"]  # contiguous: validate() checked
    skip = max(0, last - int(seqs[0]) + 1) if len(table) else 0
    if skip >= len(table):
        return 0
    rows = table[skip:] if skip else table  # read (copied) by the ring and staging, never written
    first = int(rows["seq"][0])
    if last and first != last + 1:
        raise InvalidParameter(f"replicated records start at {first}, expected {last + 1}")
    newest = int(rows["time_ms"].max())
    store._check_open(newest)
    types = rows["type"]
    if (types == _MESSAGE).all():  # the common case: a batch of sends
        replay.place(store.ring, store.backlog, rows, np.frombuffer(heap, np.uint8))
        store.staged.stage(rows, heap)
        store.staged_message_ms = max(store.staged_message_ms, newest)
    else:
        replay.apply_block(store.ring, store.backlog, rows, np.frombuffer(heap, np.uint8))
        store.staged.stage(rows, heap if (types == _MESSAGE).any() else b"")
        store.staged_message_ms = max(store.staged_message_ms, newest_message_ms(rows))
        if (types == _EPOCH).any():
            store.roll_next = True
    store._next_seq = int(rows["seq"][-1]) + 1
    store._last_epoch = int(rows["epoch"][-1])
    store.epoch = max(store.epoch, int(rows["epoch"].max()))
    return len(rows)


def _apply_small(store: PartitionStore, table: Table, heap: bytes) -> int:
    """:func:`apply_chunk` of a few records (one send, receive or delete at a
    time is the usual chunk a writer publishes), on Python scalars."""
    recs = table.tolist()
    last = store.last_seq
    skip = max(0, last - recs[0][replay.F_SEQ] + 1)
    if skip >= len(recs):
        return 0
    if skip:
        table, recs = table[skip:], recs[skip:]
    first = recs[0][replay.F_SEQ]
    if last and first != last + 1:
        raise InvalidParameter(f"replicated records start at {first}, expected {last + 1}")
    store._check_open(max(r[replay.F_TIME] for r in recs))
    if recs[0][replay.F_TYPE] == _EPOCH or recs[-1][replay.F_TYPE] == _EPOCH:
        store.roll_next = True  # (the writer's takeover or roll record: a new segment, as there)
    replay.apply_records(store.ring, store.backlog, table, recs, heap)
    has_message = False
    for r in recs:
        if r[replay.F_TYPE] == _MESSAGE:
            has_message = True
            if r[replay.F_TIME] > store.staged_message_ms:
                store.staged_message_ms = r[replay.F_TIME]
    store.staged.stage(table, heap if has_message else b"")
    store._next_seq = recs[-1][replay.F_SEQ] + 1
    store._last_epoch = recs[-1][replay.F_EPOCH]
    store.epoch = max(store.epoch, max(r[replay.F_EPOCH] for r in recs))
    return len(recs)


def truncate_after(store: PartitionStore, keep: int, now_ms: int) -> int:
    """Drop every record after seq ``keep`` (a copy that diverged from its
    writer's log keeps what it shares with it); returns how many went.

    What is staged is committed first. The segment holding ``keep + 1`` is
    cut at that seq's block and later segments are deleted; the rows of that
    block up to ``keep`` are written again as a block of their own; the ring
    and the backlog are rebuilt from the log, as after a failed write (the
    store's term stays: a copy never goes back to an older one)."""
    store._check_open(now_ms)
    store.commit()
    last = store.last_seq
    keep = max(keep, 0)
    if keep >= last or not store.index.count:
        return 0
    i = store.index.find(keep + 1)
    first, base, offset = store.index.entry(i)
    kept: Chunk | None = None
    if first <= keep:  # keep ends inside this block: its first rows are written again
        _, table, heap = store.reader.read(base, offset)
        kept = (table[table["seq"] <= keep], heap)
    store.log.close(sync=True)
    store.reader.close()
    try:
        cut_log(store.directory, base, offset)
    finally:  # (a cut that failed leaves the log whole, or shorter: what is left is read back)
        store._load(now_ms, restart=False)
    if kept is not None:
        apply_chunk(store, *kept)
        store.commit()
    return last - store.last_seq
