"""Values the client library hands to and takes from users."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

AttributeValue = str | int | float | bytes


@dataclass(frozen=True)
class OutgoingMessage:
    """One item of ``Queue.send_batch`` (a plain ``bytes`` item is a body)."""

    body: bytes | str
    attributes: dict[str, AttributeValue] | None = None
    delay: int | None = None
    """Seconds (0-900) before the message becomes visible; None = the queue's default."""
    group_id: str | None = None
    dedup_id: str | None = None

    def to_wire(self) -> list[Any]:
        body = self.body.encode() if isinstance(self.body, str) else self.body
        return [body, self.attributes or None, self.delay, self.group_id, self.dedup_id]


@dataclass(frozen=True)
class Message:
    """A received message. Delete it with ``queue.delete(message.receipt)``."""

    id: str
    body: bytes
    attributes: dict[str, AttributeValue]
    receipt: str
    receive_count: int
    sent_at: datetime
    group_id: str | None = None
    queue: str = ""
    dead_letter_source: str | None = field(default=None, compare=False)
    """For a message in a dead-letter queue: the queue it came from."""

    @classmethod
    def from_wire(cls, queue: str, item: list[Any]) -> Message:
        mid, body, attrs, receipt, rc, sent_ms, group, src = item
        # one per received message: filling the instance dict directly costs
        # half of the frozen __init__ (one object.__setattr__ per field);
        # tests/unit/test_protocol.py checks it builds the same Message
        m = object.__new__(cls)
        m.__dict__.update(id=mid, body=body, attributes=attrs or {}, receipt=receipt, receive_count=rc,
                          sent_at=datetime.fromtimestamp(sent_ms / 1000, tz=UTC), group_id=group,
                          queue=queue, dead_letter_source=src)
        return m
