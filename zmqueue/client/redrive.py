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

The queue must be a dead-letter queue (some existing queue names it as its
``dead_letter_queue``), as SQS's StartMessageMoveTask requires of its
source; otherwise InvalidParameter, naming the dead-letter queues there
are, before anything is received. Without ``to`` a redrive of any other
queue would only receive its messages and leave them; with ``to`` it would
move a live queue's backlog (a typo in the queue's name would empty the
wrong queue). ``force=True`` lifts the check of a redrive with ``to`` (to
empty a DLQ whose last source queue was deleted, or that no queue names
any more); without ``to`` it is refused. Messages received and not moved (no source queue, a source deleted
since, a batch that failed) are given back: visible again at once, their
receive counts as before (a redrive is not a consumer; counting its receives
would bring them nearer their own queue's ``max_receive_count``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zmqueue.client.models import Message, OutgoingMessage
from zmqueue.client.receiving import check_receive, give_back
from zmqueue.config import MAX_VISIBILITY_S
from zmqueue.errors import InvalidParameter, QueueNotFound, ZmqueueError

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

BATCH = 100


@dataclass
class RedriveReport:
    moved: dict[str, int] = field(default_factory=dict)
    """Messages moved, per target queue."""
    skipped: int = 0
    """Messages left in the DLQ: no ``dead_letter_source`` (sent to the DLQ
    directly) and no ``to`` given, or a source queue that no longer exists
    (named in ``missing``). They are given back at the end: visible again,
    their receive counts as before."""
    failed_deletes: int = 0
    """Moved messages whose delete from the DLQ failed: they are delivered
    from the DLQ again (and a later redrive moves them again)."""
    missing: list[str] = field(default_factory=list)
    """Source queues named by dead letters that no longer exist (their
    messages were skipped: redrive them ``to`` another queue)."""

    @property
    def total(self) -> int:
        return sum(self.moved.values())


def _check(dlq: Queue, to: str | None, max_messages: int | None, visibility_timeout: int,
           wait_time: float) -> None:
    if max_messages is not None and (type(max_messages) is not int or max_messages < 1):
        raise InvalidParameter(f"max_messages must be a whole number of at least 1 (or None: all), "
                               f"got {max_messages!r}", field="max_messages")
    if to is not None and not isinstance(to, str):
        raise InvalidParameter(f"to must be a queue name (or None: each message's source), got {to!r:.60}",
                               field="to")
    if to == dlq.name:
        raise InvalidParameter("a queue cannot be redriven into itself", field="to")
    if type(visibility_timeout) is not int or not 1 <= visibility_timeout <= MAX_VISIBILITY_S:
        raise InvalidParameter(f"visibility_timeout must be 1 to {MAX_VISIBILITY_S} seconds, "
                               f"got {visibility_timeout!r}", field="visibility_timeout")
    check_receive(1, wait_time)


def dead_letter_queues(dlq: Queue) -> dict[str, list[str]]:
    """Each queue some existing queue names as its dead-letter queue, with
    those source queues (sorted); one GET_QUEUE per queue (an admin call)."""
    client = dlq.client
    out: dict[str, list[str]] = {}
    for name in client.list_queues():
        try:
            target = client.queue_info(name)["config"].get("dead_letter_queue")
        except QueueNotFound:  # deleted meanwhile
            continue
        if isinstance(target, str) and target != name:
            out.setdefault(target, []).append(name)
    return {d: sorted(s) for d, s in sorted(out.items())}


def _check_is_dlq(dlq: Queue, to: str | None) -> None:
    """InvalidParameter unless some existing queue names ``dlq`` as its
    dead-letter queue: a redrive without ``to`` needs sources to move to, and
    one with ``to`` moves dead letters only (unless forced: see redrive)."""
    dlqs = dead_letter_queues(dlq)
    if dlq.name in dlqs:
        return
    shown = "; ".join(f"{d} (of {', '.join(s)})" for d, s in list(dlqs.items())[:10])
    more = f" and {len(dlqs) - 10} more" if len(dlqs) > 10 else ""
    listed = f"the dead-letter queues are: {shown}{more}" if dlqs else "no queue has a dead-letter queue"
    why = ("its messages have no source queue to go back to" if to is None else
           f"a redrive moves dead letters only, and would move this queue's backlog to {to!r}")
    target = "QUEUE" if to is None else to
    raise InvalidParameter(f"queue {dlq.name!r} is not a dead-letter queue: no queue names it as its "
                           f"dead_letter_queue, so {why} ({listed}); redrive a dead-letter queue, or "
                           f"pass to={target}, force=True (zmqueue queue redrive {dlq.name} --to {target} "
                           f"--force) to move every message of {dlq.name!r} to that queue anyway",
                           field="queue", queue=dlq.name)


def _target(dlq: Queue, name: str) -> Queue:
    """The queue ``name``, if the DLQ's messages can go there (a FIFO queue
    needs group ids, which only a FIFO DLQ's messages have)."""
    q = dlq.client.get_queue(name, consistent=True)  # not a queue deleted a moment ago
    if q.config.fifo and not dlq.config.fifo:
        raise InvalidParameter(f"cannot redrive the standard queue {dlq.name!r} into the FIFO queue "
                               f"{name!r}: its messages have no group_id; redrive to a standard queue",
                               field="to")
    return q


def redrive(dlq: Queue, to: str | None = None, max_messages: int | None = None,
            visibility_timeout: int = 60, wait_time: float = 1.0, force: bool = False) -> RedriveReport:
    """Move messages out of ``dlq``; see the module docstring. Stops when a
    receive finds nothing within ``wait_time`` seconds, or after
    ``max_messages``. ``to``: one target queue for every message (default:
    each message's ``dead_letter_source``). The arguments, and ``to``, are
    checked before anything is received, and the queue must be a dead-letter
    queue unless ``to`` and ``force`` are given (InvalidParameter otherwise:
    see the module docstring); if a batch fails (its target refused it, a
    host could not be reached), its messages not moved are given back
    (visible again at once, their receive counts as before) and the error is
    raised, with the report of what moved before it in ``details["redrive"]``
    (and its counts in the error's text)."""
    _check(dlq, to, max_messages, visibility_timeout, wait_time)
    if type(force) is not bool:
        raise InvalidParameter(f"force must be True or False, got {force!r:.60}", field="force")
    if force and to is None:
        raise InvalidParameter("force=True lifts the dead-letter-queue check of a redrive with to=QUEUE "
                               "only: without to, each message goes back to its dead_letter_source, so "
                               "the queue must be a dead-letter queue", field="force")
    if not force:
        _check_is_dlq(dlq, to)
    targets: dict[str, Queue | None] = {}  # None: a source queue that no longer exists
    if to is not None:
        targets[to] = _target(dlq, to)
    report = RedriveReport()
    skipped: list[Message] = []
    held: list[Message] = []  # received and not moved yet: made visible again if this fails
    try:
        while max_messages is None or report.total < max_messages:
            want = BATCH if max_messages is None else min(BATCH, max_messages - report.total)
            held = dlq.receive(max_messages=want, wait_time=wait_time, visibility_timeout=visibility_timeout)
            if not held:
                break
            by_target: dict[str, list[Message]] = {}
            for m in held:
                target = to or m.dead_letter_source
                if target is None or target == dlq.name:
                    skipped.append(m)
                else:
                    by_target.setdefault(target, []).append(m)
            for name, batch in by_target.items():
                q = targets[name] if name in targets else targets.setdefault(name, _source(dlq, name, report))
                if q is None:
                    skipped += batch
                    continue
                fifo = q.config.fifo
                q.send_batch([OutgoingMessage(m.body, attributes=dict(m.attributes) or None, delay=0,
                                              group_id=m.group_id if fifo else None,
                                              dedup_id=m.id if fifo else None) for m in batch])
                sent = set(map(id, batch))
                held = [m for m in held if id(m) not in sent]
                errors = dlq.delete_batch(batch)
                report.failed_deletes += sum(1 for e in errors if e is not None)
                report.moved[name] = report.moved.get(name, 0) + len(batch)
            held = []
    except ZmqueueError as exc:
        # what moved before the failure is not lost with the report: on the error, and in its text
        exc.details["redrive"] = report
        if report.total:
            where = ", ".join(f"{n} to {q}" for q, n in sorted(report.moved.items()))
            exc.message = (f"{exc.message} (the redrive had moved {report.total} messages from "
                           f"{dlq.name!r} before this: {where}; the rest stay in {dlq.name!r})")
        raise
    finally:
        skip = set(map(id, skipped))
        # visible again now, their receive counts as before (if this fails: after their visibility
        # timeout); each Message keeps its stream, so one CHANGE_VISIBILITY per stream and batch
        give_back(dlq, skipped + [m for m in held if id(m) not in skip])
    report.skipped = len(skipped)
    return report


def _source(dlq: Queue, name: str, report: RedriveReport) -> Queue | None:
    """A message's source queue, or None (noted in the report) if it was deleted."""
    try:
        return _target(dlq, name)
    except QueueNotFound:
        report.missing.append(name)
        return None
