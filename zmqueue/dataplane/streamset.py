"""The streams this host keeps: opened, reconciled with metadata, wiped.

Layout: ``<data dir>/queues/<queue>/<partition>/<origin>/`` holds one
stream's segment files and ``incarnation`` (the incarnation of the queue the
stream belongs to, as text: a host down while its queue was deleted and
created again removes its copies of the deleted one when it comes back,
instead of serving them in the new one); a removed stream's directory goes to the trash
(:mod:`zmqueue.dataplane.trash`) and is deleted in the background. A stream
is kept while its queue exists and this host is a replica of its partition,
or while it still holds messages (a standard stream whose origin left the
replica set keeps its messages deliverable).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from zmqueue.config import QueueConfig
from zmqueue.dataplane.storage import PartitionStore, PartitionStoreProtocol, RecoveryReport, StorageConfig
from zmqueue.dataplane.storage.records import FLAG_SEAL_KNOWN, FLAG_SEALED
from zmqueue.dataplane.stream import Role, Stream
from zmqueue.dataplane.topology import Metadata, PartitionInfo, PartKey, StreamKey
from zmqueue.dataplane.trash import Trash
from zmqueue.errors import ZmqueueError
from zmqueue.numbers import digits

log = logging.getLogger(__name__)

OPEN_RETRY_MS = 2000
"""How often a stream whose store failed to open is tried again."""
INCARNATION_FILE = "incarnation"
"""The file in a stream's directory naming its queue's incarnation."""


def read_incarnation(stream_dir: Path) -> int | None:
    """The incarnation a stream's directory records (None: none, or unreadable)."""
    try:
        text = (stream_dir / INCARNATION_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return digits(text, 20)


@dataclass
class OpenFailure:
    error: ZmqueueError
    since_ms: int
    attempts: int = 1


@dataclass
class RecoveryTotals:
    """What the recovery scans of the streams a host opened cut, summed."""

    corrupt_blocks: int = 0
    truncated_bytes: int = 0

    def add(self, report: RecoveryReport) -> None:
        self.corrupt_blocks += len(report.corrupt_blocks)
        self.truncated_bytes += report.truncated_bytes


def recovery_warning(name: str, report: RecoveryReport, last_seq: int, replicas: int) -> str:
    """The WARNING of a stream whose recovery scan cut its log (a corrupt or
    torn block: it and everything after it is dropped)."""
    where = "; ".join(f"{Path(c.path).name} at offset {c.offset}: {c.reason}" for c in report.corrupt_blocks)
    repair = ("its replicas hold the records and this copy catches up from its writer" if replicas > 1 else
              "the queue has one replica (R=1): the dropped records are lost unless restored from a "
              "backup of the segment files")
    return (f"stream {name}: the recovery scan cut {report.truncated_bytes} bytes of its log "
            f"({len(report.corrupt_blocks)} bad block(s): {where or 'none'}; segment files removed: "
            f"{', '.join(report.removed_segments) or 'none'}); every record after seq {last_seq} in "
            f"this copy is dropped; {repair} (docs/OPERATOR_GUIDE.md, \"Corrupt segments\")")


def _tombstoned(meta: Metadata, queue: str, incarnation: int) -> bool:
    """Whether a DELETE_QUEUE's tombstone names ``queue``'s ``incarnation``."""
    return meta.deleted.get(queue) == incarnation


def _carry(fresh: Stream, st: Stream) -> None:
    """What a stream started again around its store (a wipe, a cut) keeps of
    the one it replaces: its term and where it stands in its replica set."""
    fresh.epoch = st.epoch
    fresh.joining, fresh.leaving, fresh.previous = st.joining, st.leaving, st.previous
    fresh.version, fresh.handing_over = st.version, st.handing_over


def storage_config(cfg: QueueConfig, defaults: StorageConfig) -> StorageConfig:
    flags = FLAG_SEAL_KNOWN | (FLAG_SEALED if cfg.encrypted else 0)  # (readers: sealed or not)
    return replace(defaults, fsync=cfg.fsync, retention_ms=cfg.retention_s * 1000,
                   max_messages=cfg.max_messages, fifo=cfg.fifo, record_flags=flags)


class StreamSet:
    def __init__(self, node: str, root: Path, defaults: StorageConfig, trash: Path | None = None) -> None:
        self.node = node
        self.root = root
        self.defaults = defaults
        self.trash = Trash(trash if trash is not None else root.with_name(root.name + ".trash"))
        self.streams: dict[StreamKey, Stream] = {}
        """Every stream by key; changed only by :meth:`open_stream` and
        :meth:`close_stream`, which keep ``_by_part`` in step."""
        self._by_part: dict[PartKey, dict[StreamKey, Stream]] = {}
        """The same streams by partition: a receive, a parked long poll's tick
        and a push look up their partition's streams without a scan of all."""
        self.cipher_for: Callable[[QueueConfig], Any] | None = None
        """At-rest cipher of an encrypted queue (set by the host), else None."""
        self.on_open: Callable[[Stream, int], None] | None = None
        """Called with each stream opened (and the time), after its recovery."""
        self.version = 0
        """Bumped whenever a stream opens or closes or its replica set
        changes: what depends only on those (the leadership candidacies) is
        rebuilt when it moves."""
        self._kept_warned: set[str] = set()
        """Queues gone from KV without a DELETE_QUEUE whose kept data was logged."""
        self._scanned = False
        """Whether the first reconcile read the incarnations of the streams on disk."""
        self._kept: dict[StreamKey, int] = {}
        """Streams closed with their data kept (this host left the partition's
        replica set, the queue vanished from KV without a DELETE_QUEUE) -> the
        incarnation of the queue they belong to: removed when a tombstone
        names it (the queue was deleted while they were closed), never opened
        again under another incarnation of that name."""
        self.failed: dict[StreamKey, OpenFailure] = {}
        """Streams this host should keep whose store failed to open (no
        space, a stray file, out of file descriptors): retried by every
        :meth:`reconcile` (the service calls one every ``OPEN_RETRY_MS``
        while any is left), their requests refused with the cause."""
        self.recovered = RecoveryTotals()
        """What the recovery scans of the streams opened found cut (metrics)."""
        self._on_disk: dict[PartKey, set[str]] = {}
        """Origins with a directory under each partition, read from disk once
        per partition, then kept in step by :meth:`open_stream` and
        :meth:`close_stream` (the data dir is locked: nothing else writes it).
        Every metadata change reconciles every partition, and a directory
        listing per partition per change was most of a host's loop time once
        it carried a few hundred streams."""

    def path(self, key: StreamKey) -> Path:
        return self.root / key[0] / str(key[1]) / key[2]

    def kept_origins(self, part: PartKey) -> set[str]:
        """The streams of ``part`` this host keeps on disk (open or not)."""
        return set(self._local_origins(part))

    def _local_origins(self, part: PartKey) -> set[str]:
        known = self._on_disk.get(part)
        if known is None:
            d = self.root / part[0] / str(part[1])
            known = {p.name for p in d.iterdir() if p.is_dir()} if d.is_dir() else set()
            self._on_disk[part] = known
        return known

    def reconcile(self, meta: Metadata, now_ms: int) -> list[StreamKey]:
        """Open what ``meta`` assigns here, close what it no longer does;
        returns the keys closed."""
        if not self._scanned:
            self._scanned = True
            self._scan_disk()
        self._drop_deleted_kept(meta)
        want: dict[StreamKey, tuple[QueueConfig, PartitionInfo]] = {}
        for part, info in meta.partitions.items():
            cfg = meta.configs.get(part[0])
            if cfg is None or self.node not in info.replicas:
                continue
            origins = set(meta.origins(part)) | self._local_origins(part)
            for origin in origins:
                want[(part[0], part[1], origin)] = (cfg, info)
        for key in [k for k in self.failed if k not in want]:
            del self.failed[key]
        closed = []
        behind: dict[PartKey, int] = {}
        for key in list(self.streams):
            if key not in want:
                inc, remove = self.streams[key].config.incarnation, self._deleted(key, meta)
                if not remove and self._left_to_strangers(key, meta):
                    part = (key[0], key[1])
                    behind[part] = behind.get(part, 0) + self.streams[key].store.stats(now_ms)["total"]
                self.close_stream(key, remove=remove)
                if not remove:
                    self._kept[key] = inc
                closed.append(key)
        for part, n in behind.items():
            if n:
                log.warning("partition %s/%d was given replicas %s, none of which held a copy of it (its "
                            "assignment was edited in Consul KV with new replicas, as for a move to another "
                            "cluster): the %d messages this host holds of it are not carried over and are "
                            "no longer delivered; their files are kept in %s. To move a partition with its "
                            "messages, edit only its `cluster` (docs/OPERATOR_GUIDE.md, Steering)",
                            part[0], part[1], list(meta.partitions[part].replicas), n,
                            self.root / part[0] / str(part[1]))
        for key, (cfg, info) in want.items():
            replicas = info.replicas
            st = self.streams.get(key)
            if st is not None and self._recreated(st, cfg, meta):
                self.close_stream(key, remove=True)
                closed.append(key)
                st = None
            if st is None:
                try:
                    st = self.open_stream(key, cfg, replicas, now_ms)
                except ZmqueueError:  # (noted in failed: the other streams go on)
                    continue
            else:
                if (st.replicas, st.joining, st.leaving, st.previous) != (
                        replicas, info.joining, info.leaving, info.previous):
                    self.version += 1
                    # (a host that left the set no longer counts toward acks)
                    st.follower_pos = {n: q for n, q in st.follower_pos.items() if n in replicas}
                if st.config.incarnation != cfg.incarnation:  # (its config put back in KV by hand)
                    self._note_incarnation(key, cfg.incarnation)
                    self.version += 1  # (the election's candidacy carries it)
                if st.config is not cfg and st.config != cfg:  # changed (set_attributes, a KV edit)
                    st.store.reconfigure(storage_config(cfg, self.defaults))
                    if st.config.sync_replication != cfg.sync_replication:
                        self.version += 1  # (the election's candidacy carries it)
                st.configure(cfg)
            st.replicas = replicas
            st.joining, st.leaving, st.previous, st.version = (info.joining, info.leaving,
                                                               info.previous, info.version)
            st.handing_over = self.node in info.leaving and not cfg.sync_replication
        return closed

    def _left_to_strangers(self, key: StreamKey, meta: Metadata) -> bool:
        """Whether stream ``key`` closes because this host left its partition's
        replicas and none of the new replicas was one of its replicas before:
        no copy of it is left to catch up from (a drain, a failed host's
        replacement and a move edited as ``cluster`` alone always keep one)."""
        info = meta.partitions.get((key[0], key[1]))
        if info is None or key[0] not in meta.configs or self.node in info.replicas:
            return False
        return not set(info.replicas) & set(self.streams[key].replicas)

    @staticmethod
    def _recreated(st: Stream, cfg: QueueConfig, meta: Metadata) -> bool:
        """Whether ``st``'s queue was deleted (a tombstone names the incarnation
        it belongs to) and ``cfg`` is a new queue of that name: created again
        before this host saw the queue gone, the deleted queue's messages went
        on in the new one. (Without a tombstone a new incarnation keeps the data:
        the queue created again after Consul lost its state.)"""
        old = st.config.incarnation
        return cfg.incarnation != old and meta.deleted.get(st.queue) == old

    def _deleted(self, key: StreamKey, meta: Metadata) -> bool:
        """Whether stream ``key``'s queue was deleted (DELETE_QUEUE's tombstone
        names its incarnation), so its data goes. A queue gone from KV without
        one (its config key deleted by hand, Consul's state lost: the hosts saw
        every stream deleted and removed acknowledged messages) keeps its data:
        the stream is closed, and opened from disk when the queue is back."""
        queue = key[0]
        inc = self.streams[key].config.incarnation
        cfg = meta.configs.get(queue)
        if cfg is not None:
            # this host is no longer a replica of the partition, or the queue was
            # created again and its partitions are not assigned yet (the config is
            # written first): the old queue's data, kept, came back in the new one
            return _tombstoned(meta, queue, inc) and cfg.incarnation != inc
        if _tombstoned(meta, queue, inc):
            return True
        if queue not in self._kept_warned:
            self._kept_warned.add(queue)
            log.warning("queue %s is gone from Consul KV without a DELETE_QUEUE (its config key deleted "
                        "by hand, or Consul lost its state): its streams are closed and their data kept "
                        "in %s; create the queue again (or put its config back) to serve it, or delete "
                        "it (zmqueue queue delete %s) to remove the data", queue,
                        self.path(key).parent.parent, queue)
        return False

    def _scan_disk(self) -> None:
        """Note every stream on disk whose directory records an incarnation as
        closed with its data kept (a host knows nothing of its streams when it
        starts): those of a queue deleted while the host was down, named by
        the deletion's tombstone, are then removed, and never opened in a
        queue of that name created again meanwhile. The others are opened as
        the metadata says, or stay closed."""
        try:
            for qdir in self.root.iterdir() if self.root.is_dir() else ():
                for pdir in qdir.iterdir() if qdir.is_dir() else ():
                    n = digits(pdir.name)
                    if n is None or not pdir.is_dir():
                        continue
                    for odir in pdir.iterdir():
                        inc = read_incarnation(odir)
                        key = (qdir.name, n, odir.name)
                        if inc and key not in self.streams:
                            self._kept.setdefault(key, inc)
        except OSError as exc:
            log.warning("could not list the streams in %s (%s): copies of a queue deleted while this host "
                        "was down may stay on disk until it is deleted again", self.root, exc)

    def _note_incarnation(self, key: StreamKey, incarnation: int) -> None:
        """Record the incarnation of stream ``key``'s queue in its directory
        (0: not known, nothing written)."""
        path = self.path(key)
        if incarnation <= 0 or read_incarnation(path) == incarnation:
            return
        tmp = path / f"{INCARNATION_FILE}.tmp"
        try:
            tmp.write_text(f"{incarnation}\n", encoding="ascii")
            os.replace(tmp, path / INCARNATION_FILE)
        except OSError as exc:
            log.warning("stream %s: could not record its queue's incarnation (%s); if this host is down "
                        "while the queue is deleted and created again, it keeps this copy (and may serve "
                        "it in the new queue)", "/".join(map(str, key)), exc)

    def _drop_deleted_kept(self, meta: Metadata) -> None:
        """Remove the data of closed streams whose queue a tombstone names
        (deleted while they were closed; a tombstone beside the config of
        that same incarnation is a DELETE_QUEUE under way)."""
        for key, inc in list(self._kept.items()):
            cfg = meta.configs.get(key[0])
            if key in self.streams:
                del self._kept[key]  # (opened again)
            elif _tombstoned(meta, key[0], inc) and (cfg is None or cfg.incarnation != inc):
                del self._kept[key]
                self._remove(key)
                log.info("queue %s deleted: removed stream %s/%s (closed on this host)", key[0], key[1],
                         key[2])

    def open_stream(self, key: StreamKey, cfg: QueueConfig, replicas: tuple[str, ...],
                    now_ms: int) -> Stream:
        """Open (recover) the stream's store. A store that cannot be opened
        raises its ZmqueueError (:func:`oserrors.open_failed`), which is kept
        in :attr:`failed` until an open succeeds."""
        name = "/".join(map(str, key))
        try:
            store = PartitionStore.open(self.path(key), storage_config(cfg, self.defaults), now_ms=now_ms)
        except ZmqueueError as exc:
            self._open_failed(key, exc, now_ms)
            raise
        self._note_incarnation(key, cfg.incarnation)
        failure = self.failed.pop(key, None)
        if failure is not None:
            log.warning("opened stream %s after %d failed attempts (the last: %s)", name,
                        failure.attempts, failure.error)
        report = store.recovery_report
        log.info("opened stream %s: %s", name, report)
        if report.corrupt_blocks or report.truncated_bytes:
            self.recovered.add(report)
            log.warning(recovery_warning(name, report, store.last_seq, len(replicas)))
        return self._add(key, cfg, store, replicas, now_ms)

    def _open_failed(self, key: StreamKey, exc: ZmqueueError, now_ms: int) -> None:
        """Note a failed open; logged the first time and when its cause changes
        (retries of the same cause are quiet; ``zmqueue_streams_unopened``
        counts the streams still waiting)."""
        failure = self.failed.get(key)
        if failure is None:
            self.failed[key] = OpenFailure(exc, now_ms)
        else:
            failure.attempts += 1
            if str(failure.error) == str(exc):
                return
            failure.error = exc
        log.error("cannot open stream %s (%s: %s); this host's other streams go on, its requests get "
                  "this error, and the host tries again every %.0f s", "/".join(map(str, key)),
                  type(exc).__name__, exc, OPEN_RETRY_MS / 1000)

    def _add(self, key: StreamKey, cfg: QueueConfig, store: PartitionStoreProtocol,
             replicas: tuple[str, ...], now_ms: int) -> Stream:
        st = Stream(key, cfg, store, replicas, self.cipher_for(cfg) if self.cipher_for else None)
        st.local = self.node
        self.streams[key] = st
        self.version += 1
        st.opened = self.version
        self._by_part.setdefault((key[0], key[1]), {})[key] = st
        self._local_origins((key[0], key[1])).add(key[2])
        if self.on_open is not None:
            self.on_open(st, now_ms)
        return st

    def close_stream(self, key: StreamKey, remove: bool) -> None:
        st = self._drop(key)
        st.store.close()
        if remove:
            self._remove(key)
            log.info("queue %s deleted: removed stream %s/%s", key[0], key[1], key[2])

    def _remove(self, key: StreamKey) -> None:
        """Move a closed stream's directory to the trash; the partition's and
        the queue's directories go too once empty (they were left behind, one
        pair per deleted queue, for good)."""
        self.trash.discard(self.path(key))
        part = (key[0], key[1])
        on_disk = self._local_origins(part)
        on_disk.discard(key[2])
        if on_disk:
            return
        del self._on_disk[part]
        pdir = self.path(key).parent
        for d in (pdir, pdir.parent):
            try:
                d.rmdir()
            except OSError:  # (not empty: another partition, or a file; gone already)
                return

    def _drop(self, key: StreamKey) -> Stream:
        st = self.streams.pop(key)
        self.version += 1
        part = (key[0], key[1])
        self._by_part[part].pop(key)
        if not self._by_part[part]:
            del self._by_part[part]
        return st

    def resync(self, key: StreamKey, keep: int, now_ms: int) -> Stream | None:
        """A replica copy that diverged from its writer's log keeps its first
        ``keep`` records (0: none); returns the stream to catch up, or None
        when this host holds no REPLICA copy of ``key`` (only those are cut)."""
        st = self.streams.get(key)
        if st is None or st.role is not Role.REPLICA:
            return None
        if keep:
            self.truncate(key, keep, now_ms)
        else:
            self.wipe(key, now_ms)
        return self.streams.get(key)

    def wipe(self, key: StreamKey, now_ms: int) -> None:
        """Drop a diverged copy and start it empty (it then catches up)."""
        st = self.streams[key]
        self.close_stream(key, remove=False)
        self.trash.discard(self.path(key))
        fresh = self.open_stream(key, st.config, st.replicas, now_ms)  # (failed: reconcile opens it)
        _carry(fresh, st)

    def truncate(self, key: StreamKey, keep: int, now_ms: int) -> None:
        """Cut a diverged copy back to its first ``keep`` records; the stream
        starts again around its store (what it keeps beside its log, such as
        a FIFO queue's deduplication window, is rebuilt from what is left).
        The store reads its log back once (a recovery scan)."""
        st = self.streams[key]
        try:
            cut = st.store.truncate_after(keep, now_ms)
            log.warning("stream %s: cut %d records after seq %d that its writer does not hold",
                        "/".join(map(str, key)), cut, keep)
        finally:  # (a cut that failed rebuilt the store from what is on disk: so does the stream)
            self._drop(key)
            fresh = self._add(key, st.config, st.store, st.replicas, now_ms)
            _carry(fresh, st)

    def partition_streams(self, part: PartKey) -> list[Stream]:
        by_key = self._by_part.get(part)
        return list(by_key.values()) if by_key else []

    def led_streams(self, part: PartKey) -> list[Stream]:
        return [st for st in self.partition_streams(part) if st.writable]

    def close(self) -> None:
        for key in list(self.streams):
            self.close_stream(key, remove=False)
