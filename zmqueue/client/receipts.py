"""Batches of receipts: deleting received messages and changing their
visibility, for :class:`~zmqueue.client.queue.Queue` (``delete_batch``,
``change_visibility_batch``), the receives that carry deletes
(:mod:`zmqueue.client.receiving`, :mod:`zmqueue.client.receiver`) and push
subscriptions.

A batch holds receipt texts or the received Messages themselves
(:data:`Deletable`). It is grouped by the stream that wrote each message
(partition, origin), since only that stream's writer can apply it: one
DELETE / CHANGE_VISIBILITY request per stream, and one outcome per receipt in
the caller's order (None, or the error the host answered for it). Messages
read from column groups go by reference (``dref``: origin, seqs, receive
counts), without building or parsing their receipts; that reference is
built while the batch is grouped (:func:`stream_groups`, one pass). A
stream's deletes can also ride on a receive's first request (:class:`Carry`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from zmqueue.client.models import Message, StreamRef, column_ref
from zmqueue.errors import InvalidParameter, InvalidReceipt, ProtocolError, ZmqueueError, from_wire
from zmqueue.protocol import MAX_BATCH, Command, Receipt, ReceiptEncoder

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue


Deletable = str | Message
"""What the delete calls take: a receipt text, or the received Message itself
(a message read from a column group is then deleted by its (seq, receive
count), without building or parsing its receipt)."""


def deletables(receipts: Iterable[Deletable], call: str) -> list[Deletable]:
    """``receipts`` as a list; one receipt or Message given alone (a str would
    be split into characters, each refused as a malformed receipt) is
    InvalidParameter saying to pass a list."""
    if isinstance(receipts, str | bytes | Message):
        raise InvalidParameter(f"{call} takes a list of receipts or Messages, got one "
                               f"{type(receipts).__name__}: pass [it]", field="receipts")
    return list(receipts)


@dataclass
class Carry:
    """Deletes riding on a receive's first request, sent to the stream's
    writer: one stream's messages as receipt texts (``del``) or, when all were
    read from column groups, as ``[origin, seqs, receive counts]`` (``dref``);
    ``results`` once it answered."""

    partition: int
    origin: str
    idxs: list[int]
    field: str
    items: list[Any]
    results: list[Any] | None = None
    incarnation: int | None = None
    """The queue incarnation the ``dref`` messages were received from."""

    def put(self, request: dict[str, Any]) -> None:
        """Into a request body: ``del`` or ``dref`` (with ``inc``, when known)."""
        request[self.field] = self.items
        if self.incarnation is not None:
            request["inc"] = self.incarnation


def _text(item: Deletable) -> str:
    """A receipt text (a Message's receipt, built now if it was not yet)."""
    return item if isinstance(item, str) else item.receipt


def outcomes(idxs: list[int], results: list[Any], out: list[ZmqueueError | None]) -> None:
    """Per-receipt results of a host (nil or an error map) into ``out`` at ``idxs``."""
    if not isinstance(results, list) or len(results) != len(idxs):
        raise ProtocolError(f"malformed results for {len(idxs)} receipts in a reply: {results!r:.80}")
    if results.count(None) == len(results):  # all done (``out`` holds None already)
        return
    for i, res in zip(idxs, results, strict=True):
        out[i] = None if res is None else from_wire(res)


def batch(queue: Queue, command: Command, receipts: list[Deletable], timeouts: list[int] | None,
          extra: dict[str, Any] | None = None) -> list[ZmqueueError | None]:
    """DELETE (``timeouts`` None) or CHANGE_VISIBILITY (one timeout per
    receipt; ``extra``: more keys of each request's body)."""
    out: list[ZmqueueError | None] = [None] * len(receipts)
    for (p, origin), idxs in by_stream(queue, receipts).items():
        apply(queue, command, receipts, idxs, p, origin, timeouts, out, extra)
    return out


def by_stream(queue: Queue, receipts: Sequence[Deletable]) -> dict[tuple[int, str], list[int]]:
    """Receipt indexes by stream (partition, origin); checks count and queue
    (used by the delete calls)."""
    return {key: g.idxs for key, g in stream_groups(queue, receipts).items()}


@dataclass(eq=False)
class StreamGroup:
    """One stream's receipts of a batch (:func:`stream_groups`): their indexes
    in the caller's list, the receipts, and their ``dref`` columns while every
    one was read from a column group of one queue incarnation (``seqs`` None:
    they go as receipt texts, which carry it)."""

    idxs: list[int]
    items: list[Deletable]
    seqs: list[int] | None
    counts: list[int]
    incarnation: int | None = None
    """The queue incarnation of its first message read from a column group."""

    def dref(self, origin: str) -> list[Any] | None:
        """``[origin, seqs, receive counts]`` if it goes by reference, else None."""
        return None if self.seqs is None else [origin, self.seqs, self.counts]

    def carry(self, partition: int, origin: str) -> Carry:
        """Its deletes riding on a receive: by reference, else as texts."""
        refs = self.dref(origin)
        if refs is None:
            return Carry(partition, origin, self.idxs, "del", [_text(r) for r in self.items])
        return Carry(partition, origin, self.idxs, "dref", refs, incarnation=self.incarnation)


def stream_groups(queue: Queue, receipts: Sequence[Deletable]) -> dict[tuple[int, str], StreamGroup]:
    """Receipts by stream (partition, origin), in order, each stream's
    ``dref`` built on the way (one pass: the receives that carry deletes and
    push subscriptions' credits send one stream's by reference); checks
    count and queue."""
    if not 1 <= len(receipts) <= MAX_BATCH:
        raise InvalidParameter(f"1 to {MAX_BATCH} receipts per batch, got {len(receipts)}")
    groups: dict[tuple[int, str], StreamGroup] = {}
    reader, key = queue._reader
    name = queue.name
    last: StreamRef | None = None  # the stream of the previous column-read message, and its group's lists
    idxs: list[int] = []
    items: list[Deletable] = []
    seqs: list[int] | None = None
    counts: list[int] = []
    for i, r in enumerate(receipts):
        if isinstance(r, Message):
            ref = column_ref(r)
            if ref is not None and r.queue == name:  # read from a column group
                stream, seq, count = ref
                if stream is not last:
                    last = stream
                    g = groups.get((stream.partition, stream.origin))
                    if g is None:
                        g = groups[(stream.partition, stream.origin)] = StreamGroup(
                            [], [], [], [], stream.incarnation)
                    elif g.seqs is not None and g.incarnation != stream.incarnation:
                        g.seqs = None  # (or of a queue deleted since, and its successor)
                    idxs, items, seqs, counts = g.idxs, g.items, g.seqs, g.counts
                idxs.append(i)
                items.append(r)
                if seqs is not None:
                    seqs.append(seq)
                    counts.append(count)
                continue
            text = r.receipt
        else:
            text = r
        if reader is None or reader.read(text) is None:  # not the last receipt's stream
            rec = Receipt.decode(text)
            if rec.queue != queue.name:
                raise InvalidParameter(f"receipt {i} belongs to queue {rec.queue!r}, not {queue.name!r}")
            if rec.partition >= queue.config.partitions:
                raise InvalidReceipt(f"receipt {i} names partition {rec.partition}, but queue "
                                     f"{queue.name!r} has {queue.config.partitions}: it is not a "
                                     "receipt this queue handed out", partition=rec.partition)
            key = (rec.partition, rec.origin)
            reader = ReceiptEncoder(queue.name, *key, rec.incarnation)
        g = groups.get(key)
        if g is None:
            g = groups[key] = StreamGroup([], [], None, [])
        g.seqs = None  # (a receipt text: the stream's go as texts)
        g.idxs.append(i)
        g.items.append(r)
        last = None  # (the next column-read message looks its group up again)
    queue._reader = (reader, key)
    return groups


def apply(queue: Queue, command: Command, receipts: list[Deletable], idxs: list[int], p: int, origin: str,
          timeouts: list[int] | None, out: list[ZmqueueError | None],
          extra: dict[str, Any] | None = None) -> None:
    """One DELETE / CHANGE_VISIBILITY of one stream's receipts; outcomes into ``out``."""
    items: list[Any] = [_text(receipts[i]) if timeouts is None else [_text(receipts[i]), timeouts[i]]
                        for i in idxs]
    body = {"q": queue.name, "p": p, "r": items}
    if extra:
        body.update(extra)
    reply = queue.call(p, command, body, partial(queue.routes.for_stream, p, origin), origin)
    outcomes(idxs, reply["results"], out)
