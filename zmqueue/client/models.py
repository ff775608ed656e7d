"""Values the client library hands to and takes from users."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from zmqueue.errors import InvalidParameter, ProtocolError
from zmqueue.protocol import check_size, encode_blob

AttributeValue = str | int | float | bytes
ID_CHARS_MAX = 128
"""A group_id or dedup_id is 1-128 characters."""
DELAY_MAX_S = 900
"""A message's delay is 0-900 seconds."""


class StreamRef(NamedTuple):
    """What the messages of one received column group share: the stream they
    came from (partition, origin), the writer's epoch, the receipt encoder
    of that stream (``encode(seq, receive_count, epoch)``) and the queue's
    incarnation the host named (None: a host that names none)."""

    partition: int
    origin: str
    epoch: int
    encode: Callable[[int, int, int], str]
    incarnation: int | None = None


def column_ref(m: Message) -> tuple[StreamRef, int, int] | None:
    """(stream, seq, receive count) of a message read from a column group
    (:meth:`Message.from_columns`); None for any other message."""
    ref: tuple[StreamRef, int, int] | None = m.__dict__.get("_ref")
    return ref


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate, say
        raise InvalidParameter(f"the body is text that cannot be sent as UTF-8 ({exc.reason} at "
                               f"character {exc.start}); send bytes, or text without it",
                               field="body") from None


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
        body: Any = self.body
        if type(body) is not bytes:
            body = wire_body(body)
        if self.attributes:
            _check_encodable(self.attributes)
        for name, value in (("group_id", self.group_id), ("dedup_id", self.dedup_id)):
            if value is None:
                continue
            if not isinstance(value, str):
                raise InvalidParameter(f"{name} must be a str of 1-128 characters, "
                                       f"got {type(value).__name__}", field=name)
            if not 0 < len(value) <= ID_CHARS_MAX:  # (as the host checks it)
                raise InvalidParameter(f"{name} must be 1-{ID_CHARS_MAX} characters, got {len(value)}",
                                       field=name)
            try:
                value.encode()
            except UnicodeEncodeError as exc:  # a lone surrogate, say
                raise InvalidParameter(f"{name} {value!r:.60} cannot be sent as UTF-8 ({exc.reason} at "
                                       f"character {exc.start})", field=name) from None
        delay = self.delay
        if delay is not None and (type(delay) is not int or not 0 <= delay <= DELAY_MAX_S):
            raise InvalidParameter(f"delay must be a whole number of seconds from 0 to {DELAY_MAX_S}, "
                                   f"got {delay!r:.40}", field="delay")
        return [body, self.attributes or None, delay, self.group_id, self.dedup_id]

    def check_for(self, fifo: bool, max_message_bytes: int, wire: list[Any]) -> None:
        """What the queue's config refuses, as its host would, before anything
        is sent: a FIFO message without a group_id; a message over
        ``max_message_bytes``, counted as the host counts it (body + the
        attributes, group and dedup ids as stored: the same function). The
        host checks again: this handle's copy of the limit may be stale."""
        if fifo and self.group_id is None:
            raise InvalidParameter("FIFO queues need a group_id", field="group_id")
        check_size(wire[0], encode_blob(wire[1] or {}, wire[3], wire[4]), max_message_bytes)


def batch_wire(msgs: list[OutgoingMessage], fifo: bool = False,
               max_message_bytes: int | None = None) -> list[list[Any]]:
    """The wire items of ``msgs``, each checked (with the queue's ``fifo`` and
    ``max_message_bytes``, when given); a message that cannot be sent raises
    InvalidParameter naming its place in the batch."""
    out = []
    for i, msg in enumerate(msgs):
        try:
            wire = msg.to_wire()
            if max_message_bytes is not None:
                msg.check_for(fifo, max_message_bytes, wire)
        except InvalidParameter as exc:
            raise type(exc)(f"message {i}: {exc}", **{**exc.details, "index": i}) from None
        out.append(wire)
    return out


_BINARY = (bytes, bytearray, memoryview)
_ATTRIBUTE_TYPES = (str, int, float, *_BINARY)


def wire_body(body: Any) -> bytes | bytearray | memoryview:
    """A body as the wire carries it (text as UTF-8), or InvalidParameter
    naming what was given (the encoder would say only "cannot encode body")."""
    if isinstance(body, str):
        return _utf8(body)
    if isinstance(body, _BINARY):
        return body
    raise InvalidParameter(f"the body must be bytes or str (sent as UTF-8), got {type(body).__name__}",
                           field="body")


INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1
"""The integers an attribute can carry (msgpack: int64 and uint64)."""


def _check_encodable(attributes: dict[str, Any]) -> None:
    """What the wire cannot carry, as InvalidParameter before anything is sent
    (the transport's encoder said only "cannot encode body"). Names and
    lengths are checked by the host, which answers InvalidParameter too."""
    if not isinstance(attributes, dict):
        raise InvalidParameter("attributes must be a dict of names to values, "
                               f"got {type(attributes).__name__}", field="attributes")
    for name, value in attributes.items():
        if not isinstance(name, str):
            raise InvalidParameter(f"attribute name {name!r:.60} must be a str", field="attributes")
        if isinstance(value, bool) or not isinstance(value, _ATTRIBUTE_TYPES):
            raise InvalidParameter(f"attribute {name!r} must be a str, int, float or bytes, "
                                   f"got {type(value).__name__}", field="attributes")
        if type(value) is int and not INT_MIN <= value <= INT_MAX:
            raise InvalidParameter(f"attribute {name!r}: {value} does not fit in 64 bits (attribute "
                                   f"integers are {INT_MIN} to {INT_MAX}); send it as a str",
                                   field="attributes")
        for what, text in (("name", name), ("value", value)):
            if isinstance(text, str):
                try:
                    text.encode()
                except UnicodeEncodeError as exc:
                    raise InvalidParameter(f"attribute {what} {text!r:.60} cannot be sent as UTF-8 "
                                           f"({exc.reason} at character {exc.start})",
                                           field="attributes") from None


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

    @classmethod
    def from_columns(cls, queue: str, stream: StreamRef, group: list[Any]) -> list[Message]:
        """The messages of a column group (RECEIVE ``cols``: ``[origin, epoch,
        ids joined, bodies, seqs, receive counts, sent ms]``, plain messages
        of one stream). Each keeps its (stream, seq, receive count): the
        receipt text and ``sent_at`` are built when first read, and
        ``Queue.delete_and_receive`` deletes such messages without either."""
        try:
            _origin, _epoch, ids, bodies, seqs, counts, sent = group
            n = len(bodies)
            if not (isinstance(ids, bytes) and len(ids) == 16 * n and len(seqs) == n
                    and len(counts) == n and len(sent) == n):
                raise ValueError("column lengths differ")
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed column group in a receive reply: {exc}") from None
        hexes = ids.hex()
        new = object.__new__
        set_dict = object.__setattr__  # a whole new __dict__: ~10% less than update() per message
        out: list[Message] = []
        add = out.append
        at = 0
        for body, seq, rc, ms in zip(bodies, seqs, counts, sent, strict=True):
            m = new(cls)
            set_dict(m, "__dict__", {"id": hexes[at:at + 32], "body": body, "attributes": {},
                                     "receive_count": rc, "group_id": None, "queue": queue,
                                     "dead_letter_source": None, "_ref": (stream, seq, rc),
                                     "_sent_ms": ms})
            at += 32
            add(m)
        return out

    if not TYPE_CHECKING:  # hidden from mypy: attribute typos on Message stay errors
        def __getattr__(self, name: str) -> Any:
            """``receipt`` and ``sent_at`` of a column-built message, on first read."""
            d = self.__dict__
            if name == "receipt" and "_ref" in d:
                stream, seq, rc = d["_ref"]
                value = d["receipt"] = stream.encode(seq, rc, stream.epoch)
                return value
            if name == "sent_at" and "_sent_ms" in d:
                value = d["sent_at"] = datetime.fromtimestamp(d["_sent_ms"] / 1000, tz=UTC)
                return value
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
