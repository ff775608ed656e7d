"""Value objects crossing the storage interface (built only for messages returned)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

MESSAGE_ID_BYTES = 16


@dataclass(frozen=True)
class NewMessage:
    """A message to append; ``message_id`` is 16 bytes chosen by the caller."""

    message_id: bytes
    body: bytes
    attributes: bytes = b""  # opaque blob, stored and returned verbatim
    group_hash: int = 0  # u64; FIFO ordering key (0 = no group)
    delay_ms: int = 0  # visible at enqueue_ms + delay_ms


class Delivered(NamedTuple):
    """One message handed out by ``receive()``.

    A NamedTuple, not a dataclass: ``receive()`` builds one per message and a
    frozen dataclass ``__init__`` cost ~5x more (a third of a receive of 10).
    Immutable, fields read by name as before.
    """

    seq: int
    message_id: bytes
    body: bytes
    attributes: bytes
    group_hash: int
    enqueue_ms: int
    receive_count: int  # count AFTER this receive
    visible_at_ms: int  # the new visibility deadline


class Columns(NamedTuple):
    """Plain messages (no attributes, no group) handed out by
    ``receive_columns()``, in seq order, as columns: no per-message object
    is built (a receive of 100 built its Delivered tuples in ~4x the time)."""

    seqs: list[int]
    message_ids: bytes  # 16 bytes per message, joined
    bodies: list[bytes]
    receive_counts: list[int]  # counts AFTER this receive
    enqueue_ms: list[int]
    visible_at_ms: int  # the new visibility deadline, the same for all

    @property
    def size(self) -> int:
        return len(self.seqs)

    def extended(self, other: Columns) -> Columns:
        """These then ``other`` (one request's two receives, paging in between)."""
        return Columns(self.seqs + other.seqs, self.message_ids + other.message_ids,
                       self.bodies + other.bodies, self.receive_counts + other.receive_counts,
                       self.enqueue_ms + other.enqueue_ms, max(self.visible_at_ms, other.visible_at_ms))

    def delivered(self) -> list[Delivered]:
        """The same messages as :class:`Delivered` values."""
        ids = self.message_ids
        return [Delivered(seq, ids[16 * i : 16 * i + 16], body, b"", 0, enq, count, self.visible_at_ms)
                for i, (seq, body, count, enq) in enumerate(zip(self.seqs, self.bodies, self.receive_counts,
                                                                self.enqueue_ms, strict=True))]


@dataclass(frozen=True)
class Record:
    """One decoded log record (``read_records``; replication catch-up, tools)."""

    type: int
    epoch: int
    seq: int
    target_seq: int
    message_id: bytes
    time_ms: int
    visible_at_ms: int
    group_hash: int
    receive_count: int
    body: bytes
    attributes: bytes
