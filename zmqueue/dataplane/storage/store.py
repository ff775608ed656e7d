"""PartitionStore: one queue partition's messages, composed of ring + log + backlog.

The host's poll loop calls the mutating methods, then ``commit()`` once per
iteration (group commit), then replies to clients.  Times are passed in
(``now_ms``); the only thread is the interval flusher.  Not thread-safe: one
owner (the poll loop) per store.

The append path lives in :mod:`batch` (columns -> record table), the receive
path in :mod:`receive`, the next block in :mod:`staging`, size limits in
:mod:`limits`; this module wires them to the ring, backlog and log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from zmqueue.dataplane.storage import batch, readback, receive, replay, replica, select
from zmqueue.dataplane.storage.backlog import Backlog
from zmqueue.dataplane.storage.config import StorageConfig
from zmqueue.dataplane.storage.limits import FreeSpace, check_limits, require_space
from zmqueue.dataplane.storage.logwriter import LogWriter
from zmqueue.dataplane.storage.model import Columns, Delivered, NewMessage, Record
from zmqueue.dataplane.storage.oserrors import open_failed, write_failed
from zmqueue.dataplane.storage.protocol import PartitionStoreProtocol
from zmqueue.dataplane.storage.records import (
    BLOCK_TARGET_BYTES,
    MAX_BLOCK_RAW,
    RecordType,
    Table,
    encode_payload,
)
from zmqueue.dataplane.storage.recovery import RecoveryReport, recover_directory
from zmqueue.dataplane.storage.ring import IN_FLIGHT, MetaRows, Ring
from zmqueue.dataplane.storage.segment import BlockIndex, BlockReader, ScannedBlock, lock_directory
from zmqueue.dataplane.storage.staging import Staging
from zmqueue.errors import InternalError, InvalidReceipt

__all__ = ["PartitionStore", "PartitionStoreProtocol"]


STATS_KEYS = ("visible", "in_flight", "delayed", "oldest_age_ms", "total", "bytes", "backlog_on_disk",
              "blocked_on_disk", "dead_letters_waiting")
"""The counters of :meth:`PartitionStore.stats` (a partition with no stream on
a host reports them as zeros). ``dead_letters_waiting``: messages taken out
of delivery as dead letters and not yet moved to the dead-letter queue
(normally for a moment; they stay while it is missing or of the other type);
not counted in ``in_flight``."""


def _count(got: Columns | list[Delivered]) -> int:
    return got.size if isinstance(got, Columns) else len(got)


def _payload_bytes(got: Columns | list[Delivered]) -> int:
    """Bytes of the payloads (bodies + attributes) of messages handed out."""
    if isinstance(got, Columns):
        return sum(map(len, got.bodies))
    return sum([len(d.body) + len(d.attributes) for d in got])


def _joined(a: Columns | list[Delivered], b: Columns | list[Delivered]) -> Columns | list[Delivered]:
    """One request's two receives, in order (Delivered values unless both are columns)."""
    if isinstance(a, Columns) and isinstance(b, Columns):
        return a.extended(b)
    if not b:
        return a
    if not a:
        return b
    return (a.delivered() if isinstance(a, Columns) else a) + (b.delivered() if isinstance(b, Columns) else b)


class PartitionStore:
    """Ring buffer + segment log for one partition (see the package docstring)."""

    def __init__(self, directory: Path, config: StorageConfig, now_ms: int) -> None:
        self.directory, self.config = directory, config
        self.ring = Ring(config.ring_slots, config.arena_bytes, config.ring_grow_max)
        self._lock_fd = lock_directory(directory)
        self._now = now_ms
        self._space_short = False
        self._reserve = FreeSpace(directory, config.min_free_bytes) if config.min_free_bytes else None
        self._closed = False
        self._lone_epoch_base = 0
        self.epoch = 0
        try:
            self.recovery_report = self._load(now_ms, restart=True)
        except BaseException:  # (out of descriptors, say): release what is open, the lock last
            self._release()
            raise

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], config: StorageConfig, *, now_ms: int | None = None
    ) -> PartitionStore:
        """Create the directory if missing, recover the log, return a ready store.

        A failing system call (no space or inodes, a file where a directory
        must go, out of file descriptors) raises the zmqueue error of
        :func:`oserrors.open_failed`, naming the path and what to do; nothing
        stays open, so opening again later may succeed."""
        config.validate()
        path = Path(directory)
        try:
            path.mkdir(parents=True, exist_ok=True)
            return cls(path, config, int(time.time() * 1000) if now_ms is None else now_ms)
        except OSError as exc:
            raise open_failed(path, exc) from exc

    # -- loading / rollback -----------------------------------------------------
    def _load(self, now_ms: int, restart: bool) -> RecoveryReport:
        self.ring.clear()
        self.backlog = Backlog()
        self._next_seq, self._last_written = 1, 0
        self._last_epoch = 0
        self.roll_next = False
        """The next block starts a new segment: it holds an EPOCH record (a
        takeover, or the roll of an idle stream: :meth:`roll_due`)."""
        self.staged = Staging(self.config.record_flags)
        self.staged_message_ms = 0
        """The newest ``time_ms`` of the MESSAGE records staged (0: none): the
        segment's newest message, which a FIFO partition's compaction reads
        (kept as records are staged: reading it off the block was ~9 us a commit)."""
        self.index = BlockIndex()
        self.reader = BlockReader(self.directory)  # (replay pages in from the blocks verified so far)
        report, segments = recover_directory(self.directory, self._replay_block)
        self.reader.close()  # (its descriptors: the scan may have cut or removed files)
        if restart:
            replay.release_in_flight(self.ring, self.backlog)
        self.log = LogWriter(self.directory, self.config, segments, self.index)
        self.expire(now_ms)
        return report

    def _replay_block(self, base: int, block: ScannedBlock) -> None:
        """Apply one verified block as the store that wrote it did: its records,
        then the paging ahead its commit did (:meth:`_page_ahead`), so the ring
        rebuilt after a restart, a rollback or a cut is the one a copy that
        committed the same blocks holds, dead slots and all (paging in only
        at the end compacted at other moments than the commits had)."""
        self.index.add(block.header.first_seq, base, block.offset)
        replay.apply_block(self.ring, self.backlog, block.table, np.frombuffer(block.heap, np.uint8))
        self._next_seq = block.header.last_seq + 1
        self._last_written = block.header.last_seq
        self._last_epoch = int(block.table["epoch"][-1])
        self.epoch = max(self.epoch, int(block.table["epoch"].max()))
        self._page_ahead()

    def _rollback(self, exc: OSError) -> None:
        """A write failed: forget everything uncommitted by rebuilding from the log."""
        path = self.log.path
        self.log.close(sync=False)
        self.reader.close()
        self._load(self._now, restart=False)
        full = write_failed(path, exc)
        if full is not None:
            self._space_short = True
            raise full from exc
        raise InternalError(f"write to {path} failed: {exc}; uncommitted records dropped") from exc

    # -- writes -------------------------------------------------------------
    def append(self, messages: Sequence[NewMessage], now_ms: int, epoch: int = 0) -> list[int]:
        """Stage new messages (object API); same as :meth:`append_batch` of their columns."""
        self._check_open(now_ms)
        if not messages:
            return []
        return list(self._append(batch.columns_of(messages), now_ms, epoch))

    def append_batch(
        self,
        bodies: Sequence[bytes],
        now_ms: int,
        epoch: int = 0,
        *,
        message_ids: bytes | None = None,
        attributes: Sequence[bytes] | None = None,
        group_hashes: npt.ArrayLike | None = None,
        delay_ms: npt.ArrayLike | int = 0,
    ) -> range:
        """Stage ``len(bodies)`` new messages given as columns; return their (contiguous) seqs.

        Columns are described in :func:`batch.pack` (ids ``None`` = random).
        Durable (per fsync policy) after :meth:`commit`.  Raises
        InvalidParameter (bad column), QueueLimitReached, DiskFull.
        """
        self._check_open(now_ms)
        if not bodies:
            return range(0)
        packed = batch.pack(bodies, message_ids, attributes, group_hashes, delay_ms)
        return self._append(packed, now_ms, epoch)

    def _append(self, packed: batch.Packed, now_ms: int, epoch: int) -> range:
        n = packed.n
        self._check_limits(n, len(packed.heap))
        seq0 = self._next_seq
        self._next_seq = seq0 + n
        rows = self.staged.stage_packed(packed, seq0, epoch, now_ms)
        if now_ms > self.staged_message_ms:
            self.staged_message_ms = now_ms
        if epoch > self.epoch:
            self.epoch = epoch
        self._last_epoch = epoch
        replay.place_fresh(self.ring, self.backlog, rows, packed, seq0, now_ms)
        return range(seq0, seq0 + n)

    def _check_open(self, now_ms: int) -> None:
        if self._closed:
            raise InternalError(f"partition store {self.directory} is closed")
        self._now = max(self._now, now_ms)

    def _check_limits(self, n: int, size: int) -> None:
        if self._space_short:
            require_space(self.directory, size)
            self._space_short = False
        if self._reserve is not None:
            self._reserve.admit(size)
        config = self.config
        if (
            config.max_messages is not None
            or config.max_bytes is not None
            or self.staged.heap_len + size > MAX_BLOCK_RAW // 2
        ):
            check_limits(config, self._total(), self._bytes(), self.staged.heap_len, n, size)

    def _alloc(self, n: int) -> int:
        seq = self._next_seq
        self._next_seq += n
        return seq

    def _log_refs(self, rtype: RecordType, rows: MetaRows, now_ms: int, visible_at_ms: int = 0) -> None:
        """Stage one ``rtype`` record per ring row (gathered with ``ring.meta[slots]``)."""
        first = self._alloc(len(rows))
        if len(rows):
            self._last_epoch = self.epoch
        self.staged.stage_refs(rtype, rows, first, self.epoch, now_ms, visible_at_ms)

    def _log_ref(
        self, rtype: RecordType, slot: int, target: int, count: int, now_ms: int, visible_at_ms: int = 0
    ) -> None:
        """Stage one ``rtype`` record for message ``target`` in ring ``slot``, from scalars."""
        seq = self._alloc(1)
        self._last_epoch = epoch = self.epoch
        mid = self.ring.message_id(slot)
        self.staged.stage_ref(rtype, seq, target, mid, count, epoch, now_ms, visible_at_ms)

    def commit(self) -> int:
        """Write everything staged as one block; fsync if policy is ``always``.

        Returns the last seq written.  On a write error nothing staged survives
        (the in-memory state is rebuilt from the log) and DiskFull is raised for
        ENOSPC/EFBIG/EDQUOT; committed data is untouched.
        """
        if not self.staged.n:
            return self._last_written
        roll = self.roll_next
        payload, count, first, last = self.staged.take_payload()
        head, comp = encode_payload(payload, count, first, last)
        try:
            self.log.append_block(head, comp, first, last, self._now, roll, self.staged_message_ms)
        except OSError as exc:
            self._rollback(exc)
        self.staged_message_ms = 0
        if roll:
            self.roll_next = False
        self._last_written = last
        self._page_ahead()
        return last

    def _page_ahead(self) -> None:
        """After each block committed (and each block replayed: the same
        moments), page in ahead of the consumers what fits."""
        if self.backlog.cursor is not None and self.ring.live < self.ring.slots:
            self._page_in(self._now, needed=False)  # (a full ring pages nothing in)

    @property
    def last_block(self) -> tuple[Table, bytes] | None:
        """(table, heap) of the block just committed, so the writer publishes it
        without a read-back; copied out of the staging buffer on first use."""
        return self.staged.last_chunk()

    # -- reads and state changes ---------------------------------------------
    def receive(
        self,
        max_messages: int,
        now_ms: int,
        visibility_ms: int,
        *,
        max_receive_count: int | None = None,
        max_bytes: int | None = None,
        spent_bytes: int = 0,
    ) -> tuple[list[Delivered], list[Delivered]]:
        """Mark up to ``max_messages`` visible messages in flight; see the contract.

        ``max_bytes`` (None: no bound) bounds the bytes of the messages taken
        (bodies + attributes as stored) together with ``spent_bytes``, what
        the reply already holds (from other streams): the messages taken are
        the longest prefix of those that would be that fits, and at least one
        when ``spent_bytes`` is 0. The others stay receivable, their receive
        counts untouched. Dead letters do not count (they are not handed out)."""
        got, dead = self._receive(max_messages, now_ms, visibility_ms, max_receive_count, False,
                                  max_bytes, spent_bytes)
        assert isinstance(got, list)
        return got, dead

    def receive_columns(
        self,
        max_messages: int,
        now_ms: int,
        visibility_ms: int,
        *,
        max_receive_count: int | None = None,
        max_bytes: int | None = None,
        spent_bytes: int = 0,
    ) -> tuple[Columns | list[Delivered], list[Delivered]]:
        """:meth:`receive`, the messages as :class:`Columns` when every one is
        plain (no attributes, no group), else as :class:`Delivered` values."""
        return self._receive(max_messages, now_ms, visibility_ms, max_receive_count, True,
                             max_bytes, spent_bytes)

    def _receive(
        self, max_messages: int, now_ms: int, visibility_ms: int, max_rc: int | None, as_columns: bool,
        max_bytes: int | None = None, spent: int = 0,
    ) -> tuple[Columns | list[Delivered], list[Delivered]]:
        self._check_open(now_ms)
        if max_messages <= 0:
            return [], []
        ring, fifo, log = self.ring, self.config.fifo, self._log_refs
        # A FIFO receive pages in first, as much as fits (1,024 at most, see
        # Backlog.page_in): a group's next messages come in the same receive.
        # A standard one pages ahead only (cheap, see Ring.can_place) and
        # pages in for real when the ring is short. Either, left with nothing
        # more it can take in the ring (a FIFO one: with nothing at all, so
        # no group it took from is skipped), pages in as a starved receive:
        # the ring grows or compacts for the next message if it must.
        # A receive cut by ``max_bytes`` has taken all it may: no paging in.
        self._page_in(now_ms, needed=fifo)
        room = None if max_bytes is None else max_bytes - spent
        got, dead, cut = receive.receive(ring, fifo, now_ms, max_messages, visibility_ms, max_rc, log,
                                         as_columns, room, spent == 0)
        short = max_messages - _count(got) - len(dead)
        if (short > 0 and not cut and self.backlog.cursor is not None
                and (not fifo or short == max_messages)):
            # (the values above are built: paging in may compact the arena)
            self._page_in(now_ms, starved=True)
            first = spent == 0 and not _count(got)
            if room is not None and _count(got):
                room -= _payload_bytes(got)
            more, gone, _ = receive.receive(ring, fifo, now_ms, short, visibility_ms, max_rc, log, as_columns,
                                            room, first)
            got = _joined(got, more)
            dead += gone
        return got, dead

    def delete(self, seq: int, receive_count: int, now_ms: int) -> None:
        """Delete an in-flight message by its receipt (seq, receive count)."""
        self._check_open(now_ms)
        i = receive.receipt_slot(self.ring, seq, receive_count)
        self.ring.remove(i)
        self._log_ref(RecordType.DELETE, i, seq, receive_count, now_ms)

    def delete_many(self, receipts: Sequence[tuple[int, int]], now_ms: int) -> list[InvalidReceipt | None]:
        """:meth:`delete` for each receipt (seq, receive count), in order; one
        outcome per receipt: None if deleted, else the InvalidReceipt
        :meth:`delete` would raise. Distinct seqs (a consumer's batch) are
        looked up, checked, removed and logged with array operations."""
        return self.delete_columns([s for s, _ in receipts], [c for _, c in receipts], now_ms)

    def delete_columns(self, seqs: list[int], counts: list[int], now_ms: int) -> list[InvalidReceipt | None]:
        """:meth:`delete_many` of the receipts ``zip(seqs, counts)`` (as columns:
        RECEIVE ``dref`` carries them so)."""
        self._check_open(now_ms)
        k = len(seqs)
        if len(counts) != k:
            raise ValueError(f"{k} seqs but {len(counts)} receive counts")
        if k < 4:
            return [self._delete_one(s, c, now_ms) for s, c in zip(seqs, counts, strict=True)]
        lo, hi = min(seqs), max(seqs)
        if (len(set(seqs)) != k  # a repeated seq: order matters
                or not 0 <= lo <= hi < 2**63 or not 0 <= min(counts) <= max(counts) < 2**63):
            return [self._delete_one(s, c, now_ms) for s, c in zip(seqs, counts, strict=True)]
        ring = self.ring
        if hi - lo == k - 1 and self._delete_run(lo, hi, seqs, counts, now_ms):
            return [None] * k
        slots = replay.lookup(ring, np.asarray(seqs, np.int64))
        found = slots >= 0
        at = np.where(found, slots, 0)
        ok = found & (ring.state[at] == IN_FLIGHT)
        ok &= ring.receive_count[at] == np.asarray(counts, np.int64)
        out: list[InvalidReceipt | None] = [None] * k
        for i in np.flatnonzero(~ok).tolist():
            # refused: delete() says why (distinct seqs: removing the others changes nothing here)
            out[i] = self._delete_one(seqs[i], counts[i], now_ms)
        done = slots[ok]
        if len(done):
            ring.remove(done)
            self._log_refs(RecordType.DELETE, ring.meta[done], now_ms)
        return out

    def _delete_run(self, lo: int, hi: int, seqs: list[int], counts: list[int], now_ms: int) -> bool:
        """delete_many's common case: the distinct seqs ``lo..hi`` (a consumer's
        batch of consecutive messages) lie in consecutive slots, every one in
        flight with the given receive count. Then they are checked, removed and
        logged on one slice of the ring (no gather), and True is returned;
        False (nothing changed) sends the caller down the general path."""
        ring = self.ring
        first = ring.index_of(lo)
        last = first + hi - lo
        if first < 0 or last >= ring.n or int(ring.meta["seq"][last]) != hi:
            return False
        run = slice(first, last + 1)
        # out of order: each count to its seq's slot (a batch whose ends are in
        # place but whose middle is not only mismatches: the general path then)
        if seqs[0] != lo or seqs[-1] != hi:
            ordered = [0] * len(seqs)
            for s, c in zip(seqs, counts, strict=True):
                ordered[s - lo] = c
            counts = ordered
        c0 = counts[0]
        if counts.count(c0) == len(counts):  # the usual batch: one count, no list-to-array copy
            stale = bool((ring.receive_count[run] != c0).any())
        else:
            stale = not np.array_equal(ring.receive_count[run], counts)
        if stale or bool((ring.state[run] != IN_FLIGHT).any()):
            return False
        ring.remove(run)
        self._log_refs(RecordType.DELETE, ring.meta[run], now_ms)
        return True

    def _delete_one(self, seq: int, receive_count: int, now_ms: int) -> InvalidReceipt | None:
        try:
            self.delete(seq, receive_count, now_ms)
        except InvalidReceipt as exc:
            return exc
        return None

    def change_visibility(self, seq: int, receive_count: int, visibility_ms: int, now_ms: int) -> int:
        """Set a new deadline (0 = visible now) for an in-flight message; return it."""
        self._check_open(now_ms)
        i = receive.receipt_slot(self.ring, seq, receive_count)
        deadline = receive.set_deadline(self.ring, i, visibility_ms, now_ms)
        self._log_ref(RecordType.VISIBILITY, i, seq, receive_count, now_ms, deadline)
        return deadline

    def give_back(self, seq: int, receive_count: int, now_ms: int) -> None:
        """Undo the receive that made ``receive_count`` and handed nothing out
        (the message could not be opened): visible now, its receive count
        back to what it was. Logged as a VISIBILITY record with that count,
        which recovery and replicas apply as any other."""
        self._check_open(now_ms)
        i = receive.receipt_slot(self.ring, seq, receive_count)
        self.ring.receive_count[i] = receive_count - 1
        deadline = receive.set_deadline(self.ring, i, 0, now_ms)
        self._log_ref(RecordType.VISIBILITY, i, seq, receive_count - 1, now_ms, deadline)

    def mark_dead_lettered(self, seqs: Sequence[int], now_ms: int) -> None:
        """Remove messages handed out as dead letters (ignores seqs not MOVING)."""
        self._check_open(now_ms)
        slots = receive.moving_slots(self.ring, seqs)
        if len(slots):
            self.ring.remove(slots)
            self._log_refs(RecordType.DLQ_MOVE, self.ring.meta[slots], now_ms)

    def purge(self, now_ms: int) -> int:
        """Delete every message (one PURGE record); return how many there were."""
        self._check_open(now_ms)
        count = self._total()
        seq = self._alloc(1)
        self._last_epoch = self.epoch
        self.staged.stage_ref(RecordType.PURGE, seq, seq - 1, b"", 0, self.epoch, now_ms)
        self.ring.clear()
        self.backlog.reset()
        return count

    def mark_epoch(self, now_ms: int) -> int:
        """Stage one EPOCH record of the current :attr:`epoch` (a writer taking
        over: see RecordType.EPOCH); return its seq."""
        self._check_open(now_ms)
        seq = self._alloc(1)
        self._last_epoch = self.epoch
        self.staged.stage_ref(RecordType.EPOCH, seq, 0, b"", 0, self.epoch, now_ms)
        self.roll_next = True
        return seq

    def expire(self, now_ms: int) -> int:
        """Drop messages older than retention_ms; return how many.

        Not logged: expiry is derived from enqueue_ms, so recovery (which
        calls this) and paging drop the same messages.

        Pages in ahead only (no compaction below 1/2 holes, see
        Ring.can_place): the oldest messages are in the ring, so the backlog
        can hold expired ones only once the ring's have all expired, and then
        the ring is all holes or has room at its tail. (Were enqueue times out
        of seq order, an expired message beyond the ring is dropped when paging
        passes it.) Called every tick: the 1/8 rule here undid what paging
        ahead saves.
        """
        self._check_open(now_ms)
        cutoff = now_ms - self.config.retention_ms
        total, removed = 0, -1
        while removed:
            removed = select.remove_enqueued_by(self.ring, cutoff) + self._page_in(now_ms, needed=False)
            total += removed
        return total

    def _page_in(self, now_ms: int, needed: bool = True, starved: bool = False) -> int:
        if self.backlog.cursor is None:
            return 0
        cutoff = now_ms - self.config.retention_ms
        return self.backlog.page_in(self.ring, self.reader, self.index, self._last_written, cutoff, needed,
                                    starved)

    # -- maintenance and introspection ----------------------------------------
    def compact(self, max_files: int = 16, discard: Callable[[Path], None] | None = None,
                now_ms: int | None = None) -> int:
        """Delete up to ``max_files`` closed segments holding no live message
        (``discard``: what takes a file away instead of an unlink here),
        oldest first. A FIFO partition also keeps every segment holding a
        message younger than ``keep_messages_ms`` at ``now_ms`` (default: the
        newest time the store has seen), live or not: its dedup window is
        read back from them (:meth:`recent_messages`). A ring grown for
        starved receives whose live messages now fit half its configured size
        is compacted back to that size first (the host calls this once a
        second per stream: an idle stream gives the memory back)."""
        ring = self.ring
        if ring.shrinkable:
            ring.compact()  # back to the configured size
        floor = select.lowest_live_seq(ring)
        if floor is None:
            floor = self._next_seq if self.backlog.cursor is None else self.backlog.cursor
        keep_ms = self.config.keep_messages_ms
        until = ((self._now if now_ms is None else now_ms) - keep_ms) if keep_ms else None
        return self.log.remove_segments_below(floor, max_files, self.reader.forget, discard, until)

    def recent_messages(self, after_ms: int) -> Iterator[tuple[Table, bytes]]:
        """The committed MESSAGE records with ``time_ms > after_ms``, newest
        block first: each block's (rows in seq order, heap). Only the blocks
        of segments whose newest message is that young are read (the
        segment list knows, no I/O for the others); reference records are
        filtered out before any payload is looked at (a FIFO stream reads
        its dedup window back so)."""
        for seg in reversed(list(self.log.segments)):
            if seg.last_message_ms <= after_ms:
                continue
            for i in reversed(self.index.blocks_of(seg.base)):
                _, base, offset = self.index.entry(i)
                _, table, heap = self.reader.read(base, offset)
                rows = table[(table["type"] == RecordType.MESSAGE) & (table["time_ms"] > after_ms)]
                if len(rows):
                    yield rows, heap

    def roll_due(self, now_ms: int) -> bool:
        """Whether this idle stream's writer should roll its active segment
        with a record of its own (:meth:`mark_epoch`: a block holding an
        EPOCH record starts a new segment on every copy): the segment is as old as
        ``roll_after_ms``, no message is live, nothing is staged, and the
        segment holds more than such a record, so compaction can then remove
        it with the bodies it still holds (an idle stream otherwise kept its
        consumed messages on disk in its active segment for good)."""
        if self.staged.n or self.ring.live or self.backlog.cursor is not None or not self.log.segments:
            return False
        seg = self.log.segments[-1]
        if seg.size == 0 or now_ms - seg.first_ms < self.config.roll_after_ms:
            return False
        if seg.last_seq == seg.base:  # one record: the last roll's own, or a lone message
            if self._lone_epoch_base == seg.base:
                return False
            _, table, _ = self.reader.read(seg.base, 0)
            if int(table["type"][0]) == RecordType.EPOCH:
                self._lone_epoch_base = seg.base  # (asked every second while idle: read once)
                return False
        return True

    def next_wakeup_ms(self, now_ms: int) -> int | None:
        """Earliest future time a ring message becomes visible, None if none."""
        return select.next_wakeup(self.ring, now_ms)

    def has_visible(self, now_ms: int) -> bool:
        """Whether receive(now_ms) would return something (dead letters included)."""
        self._check_open(now_ms)
        fifo = self.config.fifo
        if select.has_visible(self.ring, now_ms, fifo):
            return True
        if self.backlog.cursor is None:
            return False
        self._page_in(now_ms, starved=True)  # none visible in the ring: what receive would page in
        return select.has_visible(self.ring, now_ms, fifo)

    def may_have_visible(self, now_ms: int) -> bool:
        """:meth:`has_visible` without paging in: a backlog on disk counts as
        visible (cheap enough to ask on every receive; a hint, not a promise)."""
        return self.backlog.cursor is not None or select.has_visible(self.ring, now_ms, self.config.fifo)

    def _total(self) -> int:
        return self.ring.live + self.backlog.count - len(self.backlog.gone)

    def _bytes(self) -> int:
        return self.ring.live_bytes + self.backlog.bytes

    def stats(self, now_ms: int) -> dict[str, int]:
        """Counts (the keys of :data:`STATS_KEYS`); messages only on disk
        (backlog_on_disk) are counted as visible, unless no receive can page
        them in now: then as ``blocked_on_disk`` (the ring is at its cap,
        filled by messages in flight or delayed; see :meth:`_blocked_on_disk`)."""
        counts = select.ring_counts(self.ring, now_ms)
        on_disk = self.backlog.count - len(self.backlog.gone)
        blocked = on_disk if on_disk and self._blocked_on_disk(now_ms) else 0
        counts["visible"] += on_disk - blocked
        counts.update(total=self._total(), bytes=self._bytes(), backlog_on_disk=on_disk,
                      blocked_on_disk=blocked)
        return counts

    def _blocked_on_disk(self, now_ms: int) -> bool:
        """Whether a receive at ``now_ms`` could page nothing in: the message
        at the backlog's cursor (of unknown size: any message) does not fit
        even after the ring grew to its cap and compacted. A hint, as
        ``visible`` is (expired messages at the cursor count until passed)."""
        nbytes = self.backlog.next_bytes(now_ms - self.config.retention_ms)
        return not self.ring.room_for(0 if nbytes is None else nbytes, starved=True)

    def read_records(self, from_seq: int, max_records: int) -> list[Record]:
        """Committed records with seq >= from_seq, in order (replication catch-up)."""
        return readback.read_records(self.reader, self.index, from_seq, max_records)

    @property
    def last_seq(self) -> int:
        """The last seq handed out (committed or staged)."""
        return self._next_seq - 1

    @property
    def first_seq(self) -> int:
        """The first committed seq still in the log (compaction removes the
        oldest segments); ``last_seq + 1`` when nothing is committed."""
        return self.index.entry(0)[0] if self.index.count else self._last_written + 1

    @property
    def last_epoch(self) -> int:
        """Epoch of the last record (committed or staged); 0 when empty."""
        return self._last_epoch

    def read_chunks(self, from_seq: int, max_records: int,
                    max_bytes: int = BLOCK_TARGET_BYTES) -> list[replica.Chunk]:
        """Committed rows with seq >= from_seq as raw (table, heap) chunks, up to
        ``max_records`` rows or ``max_bytes`` bytes (at least one block)."""
        return replica.read_chunks(self, from_seq, max_records, max_bytes)

    @property
    def staged_bytes(self) -> int:
        """Payload bytes staged since the last commit (the host commits early
        past :data:`BLOCK_TARGET_BYTES`)."""
        return self.staged.heap_len

    def apply_chunk(self, table: Table, heap: bytes) -> int:
        """Replica side: stage a writer's records verbatim (see replica.py)."""
        return replica.apply_chunk(self, table, heap)

    def truncate_after(self, keep: int, now_ms: int) -> int:
        """Replica side: drop the records after seq ``keep`` (see replica.py)."""
        return replica.truncate_after(self, keep, now_ms)

    def reconfigure(self, config: StorageConfig) -> None:
        """Take a queue's changed settings from ``config``: retention and the
        limits from the next expiry pass or append on, the durability policy
        from the next block written. The rest (the ring's sizes, the queue
        type) is fixed once the store is open and kept as it is."""
        self.config = replace(self.config, retention_ms=config.retention_ms, max_messages=config.max_messages,
                              max_bytes=config.max_bytes, fsync=config.fsync)
        self.log.set_policy(self.config)

    def close(self) -> None:
        """Commit, fsync, stop the flusher, release the directory lock."""
        if self._closed:
            return
        try:
            self.commit()
        finally:
            self._closed = True
            self.log.close(sync=True)
            self.reader.close()
            os.close(self._lock_fd)

    def _release(self) -> None:
        """Close what a store that failed to open has open (no commit, no sync)."""
        self._closed = True
        if "log" in self.__dict__:
            self.log.close(sync=False)
        if "reader" in self.__dict__:
            self.reader.close()
        os.close(self._lock_fd)

    def __enter__(self) -> PartitionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
