"""Storage configuration: one frozen dataclass with documented defaults and bounds."""

from __future__ import annotations

from dataclasses import dataclass

from zmqueue.errors import ConfigError

MIB = 1024 * 1024
MIN_ROLL_MS = 60_000
"""The shortest age at which a segment rolls, however short the retention
(a queue keeping messages for a second does not start a file a second)."""
FSYNC_POLICIES = ("always", "interval", "never")
DEDUP_WINDOW_MS = 5 * 60 * 1000
"""A FIFO queue's deduplication window (SQS: 5 minutes). Compaction keeps
every closed segment of a FIFO partition that holds a message this young, so
the window can be read back from the log after a restart or a wipe
(:attr:`StorageConfig.keep_messages_ms`)."""


@dataclass(frozen=True)
class StorageConfig:
    """Per-partition storage settings.

    ``fsync`` promises (see docs/SEGMENT_FORMAT.md, "Durability"):

    * ``always``: ``commit()`` returns only after ``fdatasync``; a committed
      record survives a power loss.
    * ``interval`` (default): ``commit()`` writes to the OS page cache; a
      background thread fdatasyncs every ``fsync_interval_ms``.  A committed
      record survives a process crash (kill -9); a power loss may lose the
      last ``fsync_interval_ms`` of commits (the torn tail is cut on open).
    * ``never``: the OS decides when to write back; survives a process crash only.
    """

    ring_slots: int = 65536  # messages held in memory (the hot window)
    arena_bytes: int = 32 * MIB  # payload bytes held in memory
    ring_grow_max: int = 4
    """The ring may grow to this many times ``ring_slots`` and
    ``arena_bytes`` (by doubling) while messages in flight (or delayed) fill
    it and a receive finds nothing else to take, so the visible messages on
    disk behind them are still delivered; back to the configured size once
    its live messages fit half of it. 1: never grows. Past the cap, disk
    messages wait (``blocked_on_disk`` in stats) until in-flight ones are
    deleted. Default: up to 262,144 messages and 128 MiB per stream."""
    segment_bytes_max: int = 64 * MIB  # roll to a new segment file past this size
    segment_roll_ms: int = 3_600_000
    """Roll to a new segment at the first block written once the active
    segment's first record is this old (Kafka's ``segment.ms``), or the
    retention if that is shorter (but not under :data:`MIN_ROLL_MS`): only a
    closed segment is ever compacted, so without it a slow stream kept its
    consumed and expired messages on disk until 64 MiB had been written."""
    fsync: str = "interval"
    fsync_interval_ms: int = 50
    retention_ms: int = 4 * 24 * 3600 * 1000  # 4 days
    max_messages: int | None = None  # QueueLimitReached beyond this many messages
    max_bytes: int | None = None  # QueueLimitReached beyond this many body+attribute bytes
    fifo: bool = False
    min_free_bytes: int = 0
    """Refuse new messages (DiskFull) while the disk holding the partition has
    less free space than this, read with ``statvfs`` at most every 0.1 s, so
    receives, deletes and replicated records keep room to be written and
    consumers can drain. 0: only after a write failed for lack of space."""
    record_flags: int = 0
    """OR-ed into the flags of every record committed (``records.FLAG_*``): a
    host sets FLAG_SEAL_KNOWN, and FLAG_SEALED for an encrypted queue."""

    @property
    def keep_messages_ms(self) -> int:
        """How long a closed segment stays once its newest MESSAGE record is
        this old, whether its messages are live or not: the dedup window for
        a FIFO queue (its dedup ids are read back from the log), 0 for a
        standard queue (a segment goes once none of its messages is live).
        Retention does not shorten it: SQS keeps a dedup id for 5 minutes
        even when its message expired earlier."""
        return DEDUP_WINDOW_MS if self.fifo else 0

    @property
    def roll_after_ms(self) -> int:
        """The age of its first record at which the active segment rolls."""
        return min(self.segment_roll_ms, max(self.retention_ms, MIN_ROLL_MS))

    def validate(self) -> StorageConfig:
        """Raise :class:`ConfigError` naming the field and its bound; return self."""
        _bound("ring_slots", self.ring_slots, 2, 1 << 26)
        _bound("arena_bytes", self.arena_bytes, 4096, 1 << 40)
        _bound("ring_grow_max", self.ring_grow_max, 1, 64)
        _bound("ring_slots * ring_grow_max", self.ring_slots * self.ring_grow_max, 2, 1 << 26)
        _bound("arena_bytes * ring_grow_max", self.arena_bytes * self.ring_grow_max, 4096, 1 << 40)
        _bound("segment_bytes_max", self.segment_bytes_max, 4096, 1 << 40)
        _bound("segment_roll_ms", self.segment_roll_ms, 1000, 1 << 62)
        _bound("fsync_interval_ms", self.fsync_interval_ms, 1, 3_600_000)
        _bound("retention_ms", self.retention_ms, 1000, 1 << 62)
        if self.fsync not in FSYNC_POLICIES:
            raise ConfigError(
                f"fsync must be one of {FSYNC_POLICIES}, got {self.fsync!r}",
                field="fsync",
                value=self.fsync,
            )
        _bound("min_free_bytes", self.min_free_bytes, 0, 1 << 50)
        _bound("record_flags", self.record_flags, 0, 3)
        if self.max_messages is not None:
            _bound("max_messages", self.max_messages, 1, 1 << 62)
        if self.max_bytes is not None:
            _bound("max_bytes", self.max_bytes, 1, 1 << 62)
        return self


def _bound(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(
            f"{name} must be an integer in [{low}, {high}], got {value!r}",
            field=name,
            value=value,
            low=low,
            high=high,
        )
