"""Appending blocks to the active segment, rolling, and the fsync policy.

``always``: fdatasync before ``append_block`` returns.  ``interval``: every
``fsync_interval_ms`` a daemon thread fdatasyncs the active file of each log
written since its last sync (on a dup of the fd, outside the log's lock, so a
commit never waits for a sync).  ``never``: no fsync except at ``close()``.

The interval thread is shared (:class:`IntervalFlusher`, one per interval
per process): a log marks itself when its first unsynced block is written,
and the thread syncs the marked logs one after another (about 0.15 ms each
on the test machine, docs NOTES). A thread per log woke 20 times a second
whether or not anything was written, which on a host carrying 300 logs was
most of its idle CPU and competed with the request loop for the GIL.
A rolled segment is fdatasynced before it is closed (``always``/``interval``)
and the directory is fsynced after a new file is created.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zmqueue.dataplane.storage.config import StorageConfig
from zmqueue.dataplane.storage.recovery import SegmentInfo
from zmqueue.dataplane.storage.segment import BlockIndex, SegmentWriter, fsync_dir, segment_name

log = logging.getLogger(__name__)

FAILURE_NOTE_S = 10.0


class IntervalFlusher:
    """The thread that fdatasyncs marked logs every ``interval_ms``."""

    _shared: dict[int, IntervalFlusher] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, interval_ms: int) -> IntervalFlusher:
        with cls._shared_lock:
            flusher = cls._shared.get(interval_ms)
            if flusher is None:
                flusher = cls._shared[interval_ms] = cls(interval_ms)
            return flusher

    def __init__(self, interval_ms: int) -> None:
        self.interval_s = interval_ms / 1000
        self._lock = threading.Lock()
        self._marked: dict[int, LogWriter] = {}
        self._failing: dict[int, float] = {}
        """Logs whose last sync failed: when the next failure may be logged."""
        self._thread = threading.Thread(target=self._run, name="zmq-fsync", daemon=True)
        self._thread.start()

    def mark(self, log: LogWriter) -> None:
        with self._lock:
            self._marked[id(log)] = log

    def unmark(self, log: LogWriter) -> None:
        with self._lock:
            self._marked.pop(id(log), None)
            self._failing.pop(id(log), None)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            self.sync_marked()

    def sync_marked(self) -> None:
        with self._lock:
            marked, self._marked = self._marked, {}
        for key, lw in marked.items():
            try:
                lw.flush()
            except Exception:  # (os.dup out of descriptors, say): keep the thread, retry later
                now = time.monotonic()
                if now >= self._failing.get(key, 0.0):  # a failing log is reported once per period
                    self._failing[key] = now + FAILURE_NOTE_S
                    log.exception("interval fsync of %s failed; retrying every %.0f ms (said at "
                                  "most every %.0f s)", lw.path, self.interval_s * 1000, FAILURE_NOTE_S)
                self.mark(lw)
            else:
                if self._failing.pop(key, None) is not None:
                    log.warning("interval fsync of %s works again", lw.path)


def _flusher_for(config: StorageConfig) -> IntervalFlusher | None:
    """The shared group-commit flusher of ``fsync=interval``; None otherwise."""
    return IntervalFlusher.shared(config.fsync_interval_ms) if config.fsync == "interval" else None


class LogWriter:
    def __init__(
        self, directory: Path, config: StorageConfig, segments: list[SegmentInfo], index: BlockIndex
    ) -> None:
        self.directory, self.config, self.index = directory, config, index
        self.segments = segments
        self.lock = threading.Lock()
        self.writer: SegmentWriter | None = None
        if segments:
            last = segments[-1]
            self.writer = SegmentWriter(directory / segment_name(last.base), last.base)
        self._dirty = False
        self._flusher = _flusher_for(config)
        self._roll_at = self._roll_time()
        self._limit_noted = -FAILURE_NOTE_S
        """When a roll forced by the file-size limit was last logged."""

    def _roll_time(self) -> int:
        """When the active segment is as old as ``roll_after_ms`` (kept, not
        computed per block: the single-send commit path is ~11 us)."""
        return self.segments[-1].first_ms + self.config.roll_after_ms if self.segments else 0

    def set_policy(self, config: StorageConfig) -> None:
        """Switch the durability policy (``fsync``) and the roll age (it
        follows the retention) for the blocks written from now on. Moving to
        ``always`` syncs what is written already, so every block acknowledged
        after the switch is on disk with what came before."""
        with self.lock:
            if config.fsync == "always" and self.config.fsync != "always" and self.writer is not None:
                self.writer.sync()
                self._dirty = False
            self.config = config
            self._flusher = _flusher_for(config)
            self._roll_at = self._roll_time()
            if self._dirty and self._flusher is not None:  # written under "never": synced soon now
                self._flusher.mark(self)

    @property
    def path(self) -> Path:
        return self.writer.path if self.writer else self.directory

    def append_block(
        self, head: bytes, payload: bytes, first_seq: int, last_seq: int, now_ms: int, roll: bool = False,
        message_ms: int = 0,
    ) -> None:
        """Write one block, header and compressed payload (rolling first if
        ``roll``, if the active segment would grow past ``segment_bytes_max``
        or if it is as old as ``roll_after_ms`` at ``now_ms``, or when the
        process's file-size limit stops the active segment: EFBIG); raises
        OSError untouched. ``message_ms``: the newest ``time_ms`` of the
        block's MESSAGE records (0: none, or not tracked: a standard queue)."""
        with self.lock:
            writer = self.writer
            if writer is None or (writer.size > 0 and (
                roll
                or writer.size + len(head) + len(payload) > self.config.segment_bytes_max
                or now_ms >= self._roll_at
            )):
                writer = self._roll(first_seq, now_ms)
            try:
                offset = writer.write_block(head, payload)
            except OSError as exc:
                if exc.errno != errno.EFBIG or writer.size == 0 or os.fstat(writer.fd).st_size != writer.size:
                    raise
                # the process's file-size limit (ulimit -f) stops this segment: the
                # block goes to a new one (only once cut back here: a torn block
                # left behind would make recovery drop every later segment)
                if time.monotonic() >= self._limit_noted + FAILURE_NOTE_S:  # (every roll: at most so often)
                    self._limit_noted = time.monotonic()
                    log.warning("%s reached the host's file-size limit (ulimit -f, RLIMIT_FSIZE) at %d "
                                "bytes: a new segment starts at seq %d (raise the limit: segments "
                                "are meant to grow to %d bytes)", writer.path, writer.size, first_seq,
                                self.config.segment_bytes_max)
                writer = self._roll(first_seq, now_ms)
                offset = writer.write_block(head, payload)
            if self.config.fsync == "always":
                writer.sync()
            elif not self._dirty:
                self._dirty = True
                if self._flusher is not None:
                    self._flusher.mark(self)
            self.index.add(first_seq, writer.base, offset)
            seg = self.segments[-1]
            seg.size = writer.size
            seg.last_seq = last_seq
            if message_ms > seg.last_message_ms:
                seg.last_message_ms = message_ms

    def _roll(self, first_seq: int, now_ms: int) -> SegmentWriter:
        old = self.writer
        if old is not None:
            if self.config.fsync != "never":
                old.sync()
            old.close()
            self.writer = None
        writer = SegmentWriter(self.directory / segment_name(first_seq), first_seq)
        self.writer = writer
        self.segments.append(SegmentInfo(first_seq, 0, first_seq - 1, now_ms))
        self._roll_at = self._roll_time()
        if self.config.fsync != "never":
            fsync_dir(self.directory)
        return writer

    def remove_segment(self, base: int, discard: Callable[[Path], None] | None = None) -> None:
        """Delete a closed segment file (compaction); never the active one.
        ``discard`` takes the file away instead of an unlink here (a host's
        trash: unlinking 64 MiB took ~12 ms)."""
        with self.lock:
            assert self.writer is None or self.writer.base != base
            self.segments = [s for s in self.segments if s.base != base]
            path = self.directory / segment_name(base)
            if discard is None:
                path.unlink(missing_ok=True)
            else:
                discard(path)
            self.index.drop_segment(base)

    def remove_segments_below(self, floor: int, max_files: int, forget: Callable[[int], None],
                              discard: Callable[[Path], None] | None = None,
                              messages_until_ms: int | None = None) -> int:
        """Delete up to ``max_files`` oldest closed segments whose last seq <
        ``floor`` and, given ``messages_until_ms``, whose newest MESSAGE
        record is no younger than it (a FIFO partition's dedup window);
        oldest first, stopping at the first that stays (no hole)."""
        removed = 0
        for seg in list(self.segments[:-1]):
            if seg.last_seq >= floor or removed >= max_files:
                break
            if messages_until_ms is not None and seg.last_message_ms > messages_until_ms:
                break
            forget(seg.base)
            self.remove_segment(seg.base, discard)
            removed += 1
        return removed

    @property
    def unsynced(self) -> bool:
        """Blocks were written since the last fdatasync (``interval``/``never``)."""
        with self.lock:
            return self._dirty

    def flush(self) -> None:
        """fdatasync the active file if anything was written since the last sync."""
        with self.lock:
            if not self._dirty or self.writer is None:
                return
            fd = os.dup(self.writer.fd)
            self._dirty = False
        try:
            os.fdatasync(fd)
        except OSError:
            with self.lock:
                self._dirty = True
                if self._flusher is not None and self.writer is not None:
                    self._flusher.mark(self)  # try again at the next interval
        finally:
            os.close(fd)

    def close(self, sync: bool = True) -> None:
        if self._flusher is not None:
            self._flusher.unmark(self)
        with self.lock:
            if self.writer is not None:
                if sync:
                    self.writer.sync()
                self.writer.close()
                self.writer = None
