"""Dead-letter redrive: move messages from a dead-letter queue back to the
queues they came from (or to one named queue), as SQS's message move task
does.

Batch by batch: receive from the DLQ (the messages stay invisible there for
``visibility_timeout``), send them to their target with the same body,
attributes and group id, and only then delete them from the DLQ. A failure
between the send and the delete leaves a message in both queues (at least
once, like every move between queues); on a FIFO target the DLQ message id
is the dedup id, so a repeated move within the 5-minute window is dropped
there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zmqueue.client.models import Message, OutgoingMessage
from zmqueue.errors import InvalidParameter, ZmqueueError

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

BATCH = 100


@dataclass
class RedriveReport:
    moved: dict[str, int] = field(default_factory=dict)
    """Messages moved, per target queue."""
    skipped: int = 0
    """Messages left in the DLQ: no ``dead_letter_source`` (sent to the DLQ
    directly) and no ``to`` given. They are made visible again at the end."""
    failed_deletes: int = 0
    """Moved messages whose delete from the DLQ failed: they are delivered
    from the DLQ again (and a later redrive moves them again)."""

    @property
    def total(self) -> int:
        return sum(self.moved.values())


def redrive(dlq: Queue, to: str | None = None, max_messages: int | None = None,
            visibility_timeout: int = 60, wait_time: float = 1.0) -> RedriveReport:
    """Move messages out of ``dlq``; see the module docstring. Stops when a
    receive finds nothing within ``wait_time`` seconds, or after
    ``max_messages``. ``to``: one target queue for every message (default:
    each message's ``dead_letter_source``)."""
    if max_messages is not None and max_messages < 1:
        raise InvalidParameter("max_messages must be at least 1", field="max_messages")
    if to == dlq.name:
        raise InvalidParameter("a queue cannot be redriven into itself", field="to")
    client = dlq.client
    targets: dict[str, Queue] = {}
    report = RedriveReport()
    skipped: list[Message] = []
    try:
        while max_messages is None or report.total < max_messages:
            want = BATCH if max_messages is None else min(BATCH, max_messages - report.total)
            msgs = dlq.receive(max_messages=want, wait_time=wait_time, visibility_timeout=visibility_timeout)
            if not msgs:
                break
            by_target: dict[str, list[Message]] = {}
            for m in msgs:
                target = to or m.dead_letter_source
                if target is None or target == dlq.name:
                    skipped.append(m)
                else:
                    by_target.setdefault(target, []).append(m)
            for name, batch in by_target.items():
                q = targets.get(name) or targets.setdefault(name, client.get_queue(name))
                fifo = q.config.fifo
                q.send_batch([OutgoingMessage(m.body, attributes=dict(m.attributes) or None, delay=0,
                                              group_id=m.group_id if fifo else None,
                                              dedup_id=m.id if fifo else None) for m in batch])
                errors = dlq.delete_batch(batch)
                report.failed_deletes += sum(1 for e in errors if e is not None)
                report.moved[name] = report.moved.get(name, 0) + len(batch)
    finally:
        for m in skipped:  # hidden for this run only (if this fails: until their timeout)
            with contextlib.suppress(ZmqueueError):
                dlq.change_visibility(m, 0)
    report.skipped = len(skipped)
    return report

