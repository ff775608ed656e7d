"""zmqueue wire protocol, version 1: pure encode/decode, no socket code.

Every message between a client (DEALER) and a host (ROUTER), or between two
hosts, is ONE ZeroMQ frame (after the ROUTER's routing-id frame):

```
offset  size  field
0       2     magic        b"ZQ"
2       1     version      1
3       1     command      Command (u8)
4       1     flags        bit 0 REPLY, bit 1 ERROR, bit 2 PUSH (unsolicited, host -> client)
5       3     reserved     zero
8       8     request_id   u64 big-endian, chosen by the requester, echoed in the reply
16      ...   body         MessagePack (maps with short string keys; bytes stay bytes)
```

Batches are packed in one body, never as extra frames (frames are not a
batching format: one frame of 100 packed payloads moves several times more
data than 100 frames). A reply carries the request's command and
request id with the REPLY flag; an error reply also has the ERROR flag and the
body ``{"code": int, "message": str, "details": map}`` (codes in
:mod:`zmqueue.errors`). Bodies of each command are documented in
docs/PROTOCOL.md.

Decoding is defensive: anything malformed raises a :class:`ProtocolError`
subclass, never anything else, so a host can answer with an error reply or
drop and count the frame.
"""

from __future__ import annotations

import binascii
import hashlib
import itertools
import secrets
import struct
import threading
import zlib
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any

import msgpack

from zmqueue.errors import (
    InvalidParameter,
    InvalidReceipt,
    MessageTooLarge,
    ProtocolError,
    UnknownCommand,
    UnsupportedVersion,
    ZmqueueError,
    to_wire,
)

MAGIC = b"ZQ"
VERSION = 1
HEADER = struct.Struct(">2sBBB3xQ")
HEADER_SIZE = HEADER.size  # 16
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest frame a host decodes; sockets also set ZMQ_MAXMSGSIZE to this."""
PEER_MAX_FRAME_BYTES = 2 * MAX_FRAME_BYTES
"""Largest replication frame (REPLICATE, a CATCH_UP reply) a host takes from a
peer: such a frame carries blocks of up to about 8 MiB plus one block, and a
block holds up to about 8 MiB plus one client request (itself at most
MAX_FRAME_BYTES)."""
MAX_BATCH = 1000
"""Most messages, receipts or dead letters one request carries (SEND ``m``/``b``/``dl``,
RECEIVE ``max``, DELETE and CHANGE_VISIBILITY ``r``)."""
REPLY_MESSAGE_BYTES_MAX = 32 * 1024 * 1024
"""Most bytes of messages (bodies plus attributes, as stored) a host hands out
in one reply or push: a RECEIVE (a parked long poll's too, and one carrying
deletes) or a subscription's DELIVER. A receive may therefore return fewer
than ``max`` messages, and always at least one when any is receivable (a
message is at most 1 MiB, ``config.MAX_MESSAGE_BYTES_LIMIT``); the others stay
visible, their receive counts untouched. Well below MAX_FRAME_BYTES: the
per-message fields (id, receipt, counts) of MAX_BATCH messages and an
encrypted queue's overhead fit in the rest. Before, 100 messages of 1 MiB made
a reply the client's socket dropped (ZMQ_MAXMSGSIZE) after they were taken in
flight: they came back only after their visibility timeout, or went to the
dead-letter queue unseen."""
DEAD_LETTER_BATCH_BYTES_MAX = 32 * 1024 * 1024
"""Most bytes of messages (bodies plus attributes, as stored: sealed ones are
no smaller than they go on the wire) one dead-letter move carries, besides
MAX_BATCH messages at most: a SEND ``dl`` to the host that writes the DLQ
stream, or one append to a DLQ stream this host writes. Always at least one
message (a message is at most 1 MiB, ``config.MAX_MESSAGE_BYTES_LIMIT``); the
rest go in the next moves, in order. Well below MAX_FRAME_BYTES, what the
receiving host's peer socket takes (ZMQ_MAXMSGSIZE; PEER_MAX_FRAME_BYTES
applies to replication frames and forwarded replies only): the per-message
fields (id, count, source queue) of MAX_BATCH messages fit in the rest, and
the block a move makes, replicated in one frame, stays well below
PEER_MAX_FRAME_BYTES. Before, moves were cut by count only: 100 dead letters
of 900 KiB made a frame the DLQ's host dropped, and the move timed out and
was retried with the same batch for good."""
MAX_REQUEST_ITEMS = 256 * 1024
"""Most values (array elements and map entries, nested ones too) a host
decodes from one request body. Decoding builds a Python object per value: one
byte of msgpack (an empty array, ``0x90``) costs a 56-byte list and the loop
its time, with no other thread able to run (the decoder holds the GIL), so a
frame of a few MB of them stalled a host past its health checks. Legitimate
requests hold far fewer (a SEND of 1,000 messages with 10 attributes each is
about 40,000); a body of at most this many bytes cannot hold more, so only
larger bodies are counted."""
FIFO_ORIGIN = "fifo"
"""The origin of a FIFO partition's one replication stream (a standard
partition's streams are named by the node that accepts their sends): in
receipts, stream keys and Consul keys."""


class Command(IntEnum):
    """Command codes (u8). Never renumber; only append."""

    PING = 1
    STATUS = 2
    CREATE_QUEUE = 10
    DELETE_QUEUE = 11
    LIST_QUEUES = 12
    GET_QUEUE = 13
    PURGE_QUEUE = 14
    QUEUE_STATS = 15
    SET_QUEUE_ATTRIBUTES = 16
    SEND = 20
    RECEIVE = 21
    DELETE = 22
    CHANGE_VISIBILITY = 23
    CANCEL = 24
    SUBSCRIBE = 30
    CREDIT = 31
    UNSUBSCRIBE = 32
    DELIVER = 33
    REPLICATE = 50
    CATCH_UP = 51
    POSITION = 52
    HEARTBEAT = 53
    POSITIONS = 54


class Flags(IntFlag):
    NONE = 0
    REPLY = 1
    ERROR = 2
    PUSH = 4


@dataclass(slots=True)
class Frame:
    """One decoded frame. Not frozen: a frozen dataclass's ``__init__`` costs
    four times as much, and one is built per frame on both sides; nothing
    changes a frame after :func:`decode`."""

    command: Command
    flags: Flags
    request_id: int
    body: Any

    @property
    def is_error(self) -> bool:
        return self.flags in ERROR_FLAGS

    @property
    def is_push(self) -> bool:
        return self.flags in PUSH_FLAGS


_COMMANDS: dict[int, Command] = {int(c): c for c in Command}
_FLAGS: tuple[Flags, ...] = tuple(Flags(i) for i in range(8))
"""Lookup tables for :func:`decode` (an Enum call costs about a microsecond,
several times per request on both sides)."""
ERROR_FLAGS = frozenset(f for f in _FLAGS if f & Flags.ERROR)
PUSH_FLAGS = frozenset(f for f in _FLAGS if f & Flags.PUSH)
NOT_REQUEST_FLAGS = frozenset(f for f in _FLAGS if f & (Flags.REPLY | Flags.PUSH))
"""Flag sets for membership tests (``flags & Flags.X`` runs Python-level Flag code)."""


_packers = threading.local()
"""One msgpack Packer per thread (``msgpack.packb`` builds a new one per call,
about 1 us of the ~1.4 us it takes for a small body)."""


def _pack(body: Any) -> bytes:
    packer = getattr(_packers, "p", None)
    if packer is None:
        packer = _packers.p = msgpack.Packer(use_bin_type=True)
    try:
        return packer.pack(body)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        _packers.p = None  # a failed pack may leave bytes behind: start afresh
        raise ProtocolError(f"cannot encode body: {exc}") from exc


def encode(command: Command, request_id: int, body: Any = None, flags: Flags = Flags.NONE) -> bytes:
    if not 0 <= request_id < 2**64:
        raise ProtocolError(f"request id {request_id} out of range")
    return HEADER.pack(MAGIC, VERSION, int(command), int(flags), request_id) + _pack(body)


def encode_request(command: Command, request_id: int, body: Any = None) -> bytes:
    return encode(command, request_id, body)


def encode_reply(command: Command, request_id: int, body: Any = None) -> bytes:
    return encode(command, request_id, body, Flags.REPLY)


def encode_error(command: Command | int, request_id: int, exc: ZmqueueError) -> bytes:
    cmd = int(command)
    head = HEADER.pack(MAGIC, VERSION, cmd, int(Flags.REPLY | Flags.ERROR), request_id)
    return head + _pack(to_wire(exc))


def encode_push(command: Command, body: Any) -> bytes:
    return encode(command, 0, body, Flags.PUSH)


def peek_header(data: bytes) -> tuple[int, int] | None:
    """(command, request_id) of a frame whose header is intact, else None.

    Lets a host address an error reply to a frame whose body is broken.
    """
    if len(data) < HEADER_SIZE or data[:2] != MAGIC:
        return None
    _, _, cmd, _, rid = HEADER.unpack_from(data)
    return cmd, rid


def decode(data: bytes, limit: int = MAX_FRAME_BYTES, max_items: int | None = None) -> Frame:
    """Decode one frame of at most ``limit`` bytes, whose body holds at most
    ``max_items`` values (:data:`MAX_REQUEST_ITEMS`; None: not counted);
    raises ProtocolError (or a subclass) on any defect."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"frame of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    if len(data) > limit:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds the {limit}-byte limit")
    magic, version, cmd, flags, rid = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError("bad magic: not a zmqueue frame")
    if version != VERSION:
        raise UnsupportedVersion(
            f"protocol version {version} is not supported (this side speaks {VERSION}); "
            "upgrade the older side", version=version)
    command = _COMMANDS.get(cmd)
    if command is None:
        raise UnknownCommand(f"unknown command code {cmd}", command=cmd)
    try:
        if max_items is None or len(data) - HEADER_SIZE <= max_items:  # (a value takes a byte at least)
            body = msgpack.unpackb(
                memoryview(data)[HEADER_SIZE:], raw=False, strict_map_key=False, use_list=True
            )
        else:
            body = _unpack_counted(memoryview(data)[HEADER_SIZE:], command, max_items)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises many types on garbage
        if isinstance(exc, ValueError) and "exceeds max_" in str(exc):  # (one array or map alone)
            raise _too_many(command, max_items) from None
        raise ProtocolError(f"malformed body of {command.name}: {type(exc).__name__}") from None
    return Frame(command, _FLAGS[flags & 0x7], rid, body)


def _too_many(command: Command, max_items: int | None) -> ProtocolError:
    return ProtocolError(f"body of {command.name} holds more than {max_items} values (array elements and "
                         "map entries): split the request")


def _unpack_counted(body: memoryview, command: Command, max_items: int) -> Any:
    """Unpack ``body``, counting each array's and map's values as it is built
    and stopping once they pass ``max_items`` (no one array or map may hold
    more either, refused before it is built)."""
    left = max_items

    def counted(obj: Any) -> Any:
        nonlocal left
        left -= len(obj)
        if left < 0:
            raise _too_many(command, max_items)
        return obj

    return msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True,
                           max_array_len=max_items, max_map_len=max_items,
                           list_hook=counted, object_hook=counted)


RETRY_MARK = "rt"
"""Body key of a SEND the client library sends again after its host failed (docs/PROTOCOL.md)."""


def request_fingerprint(payload: bytes, body: Any) -> int:
    """CRC-32 of a request's body bytes, telling a retry (the same request
    sent again) from another request that reuses its id. A body marked
    :data:`RETRY_MARK` is fingerprinted as this module encodes it without the
    mark, which is how the client library encodes the first attempt."""
    if isinstance(body, dict) and RETRY_MARK in body:
        return zlib.crc32(_pack({k: v for k, v in body.items() if k != RETRY_MARK}))
    return zlib.crc32(memoryview(payload)[HEADER_SIZE:])


def new_request_id() -> int:
    """A random 63-bit starting request id (callers count up from it)."""
    return secrets.randbits(63) | 1


class RequestIds:
    """One sender's request ids: counting up from a random start (a random
    id per request costs microseconds on every request and position report).
    ``next()`` is safe from several threads (``itertools.count`` is atomic)."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = itertools.count(new_request_id())

    def next(self) -> int:
        return next(self._count) % 2**63


MESSAGE_ID_BYTES = 16


def sent_ids(body: Any) -> list[str] | None:
    """The message ids (hex texts, in order) of a SEND reply: ``ids``, or
    ``ib`` (16 bytes each, joined: the answer to plain bodies, ``b``); None
    if the reply has neither."""
    if not isinstance(body, dict):
        return None
    ids = body.get("ids")
    if isinstance(ids, list):
        return [str(i) for i in ids]
    raw = body.get("ib")
    if isinstance(raw, bytes) and len(raw) % MESSAGE_ID_BYTES == 0:
        return hex_ids(raw)
    return None


def hex_ids(raw: bytes) -> list[str]:
    """Joined 16-byte message ids as the hex texts a SEND's ``ids`` reply carries."""
    text, step = raw.hex(), 2 * MESSAGE_ID_BYTES
    return [text[i:i + step] for i in range(0, len(text), step)]


def refused_plain_bodies(exc: ZmqueueError) -> bool:
    """Whether a SEND of plain bodies (``b``) was refused by a host from
    before them: such a host asks for ``m`` (INVALID_PARAMETER on the field
    ``messages``, which a host that knows ``b`` never names for it). The
    client then sends ``m`` lists instead."""
    return isinstance(exc, InvalidParameter) and exc.details.get("field") == "messages"


def group_partition(group_id: str, partitions: int) -> int:
    """The partition of a FIFO message group: stable across clients and hosts."""
    digest = hashlib.blake2b(group_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


# --- a message as stored: its attributes blob, and its size --------------------
# (here, not in the data plane, because the client checks a message's size
# before sending it, and must count it as its host does)


def encode_blob(attrs: dict[str, Any], group: str | None, dedup: str | None,
                carried_rc: int = 0, source: str | None = None) -> bytes:
    """The opaque attributes blob stored beside a body: a MessagePack map of
    ``a`` (user attributes), ``g`` (FIFO group id), ``d`` (dedup id), ``rc``
    (receive count carried over by a DLQ move), ``src`` (a dead letter's
    source queue), each only when set; b"" when none is."""
    blob: dict[str, Any] = {}
    if attrs:
        blob["a"] = attrs
    if group:
        blob["g"] = group
    if dedup:
        blob["d"] = dedup
    if carried_rc:
        blob["rc"] = carried_rc
    if source:
        blob["src"] = source
    return msgpack.packb(blob, use_bin_type=True) if blob else b""


def decode_blob(blob: bytes) -> dict[str, Any]:
    """The map :func:`encode_blob` wrote ({} for b"")."""
    if not blob:
        return {}
    try:
        out = msgpack.unpackb(blob, raw=False)
    except Exception:  # a blob this layer wrote is never malformed; be safe anyway
        return {}
    return out if isinstance(out, dict) else {}


def check_size(body: bytes | bytearray | memoryview, blob: bytes, limit: int, at: int | None = None) -> None:
    """MessageTooLarge if body and attributes blob (:func:`encode_blob`, as
    stored) pass ``limit``, a queue's ``max_message_bytes``; the error names
    message ``at`` of the request, if given. The host checks every SEND item
    with it, and the client each message before sending, so both count a
    message's size the same way."""
    body_len = len(body) if type(body) is bytes else memoryview(body).nbytes
    size = body_len + len(blob)
    if size > limit:
        where = "" if at is None else f"message {at}: "
        raise MessageTooLarge(
            f"{where}{size} bytes (body {body_len} + attributes, group and dedup ids "
            f"{len(blob)}, as stored) exceed the queue's limit of {limit} bytes; send a smaller body "
            "or fewer attributes, or raise max_message_bytes", size=size, limit=limit)


RECEIPT_VERSION = 3
"""Receipts carry the queue's incarnation (version 3); version-2 handles,
without it, are still read."""
_RECEIPT_V2 = 2


@dataclass(frozen=True)
class Receipt:
    """A receipt handle: ``base64url(msgpack([3, queue, partition, origin,
    incarnation, seq, receive_count, epoch]) + crc32)`` (version 2: without
    ``incarnation``).

    Opaque to users; the client library reads the queue, partition and
    origin (the replication stream: ``fifo``, or the node that accepted a
    standard message) from it only to route a delete. A handle is stale when
    the message was received again since (its receive count moved on) or is
    gone. ``incarnation`` tells the queue that handed it out from a queue of
    the same name created after that one was deleted (the ``CreateIndex`` of
    its config key in Consul); None in a version-2 handle.
    """

    queue: str
    partition: int
    origin: str
    seq: int
    receive_count: int
    epoch: int = 0
    incarnation: int | None = None

    def encode(self) -> str:
        return ReceiptEncoder(self.queue, self.partition, self.origin, self.incarnation)(
            self.seq, self.receive_count, self.epoch)

    @classmethod
    def decode(cls, text: Any) -> Receipt:
        body = _receipt_body(text)
        try:
            fields = msgpack.unpackb(body, raw=False)
        except Exception:
            raise _bad_receipt() from None
        inc: Any = None
        if isinstance(fields, list) and len(fields) == 8 and fields[0] == RECEIPT_VERSION:
            _, queue, part, origin, inc, seq, rc, epoch = fields
        elif isinstance(fields, list) and len(fields) == 7 and fields[0] == _RECEIPT_V2:
            _, queue, part, origin, seq, rc, epoch = fields
        else:
            raise _bad_receipt()
        if not isinstance(queue, str) or not isinstance(origin, str) \
                or not (isinstance(part, int) and isinstance(seq, int) and isinstance(rc, int)
                        and isinstance(epoch, int)) or min(part, seq, rc, epoch) < 0 \
                or not (inc is None or (type(inc) is int and inc >= 0)):
            raise _bad_receipt()
        return cls(queue, part, origin, seq, rc, epoch, inc)


def _receipt_body(text: Any) -> bytes:
    """A receipt's msgpack bytes, its base64 and CRC checked; InvalidReceipt if not."""
    if not isinstance(text, str) or not 8 <= len(text) <= 512:
        raise _bad_receipt()
    try:
        raw = binascii.a2b_base64((text + _PAD[len(text) % 4]).encode("ascii").translate(_FROM_URLSAFE))
    except Exception:
        raise _bad_receipt() from None
    body = raw[:-4]
    if len(raw) < 5 or zlib.crc32(body) != int.from_bytes(raw[-4:], "big"):
        raise _bad_receipt()
    return body


_PAD = ("", "===", "==", "=")
"""Padding that completes a base64 text of length ``n`` (index ``n % 4``)."""
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


class ReceiptEncoder:
    """``Receipt(queue, partition, origin, seq, rc, epoch, incarnation).encode()``
    for one stream, with the constant part packed once: a receive encodes a
    receipt per message. Without an incarnation (None): version-2 handles."""

    __slots__ = ("_prefix",)

    def __init__(self, queue: str, partition: int, origin: str, incarnation: int | None = None) -> None:
        # the array's header and every element before (seq, rc, epoch)
        head = ([_RECEIPT_V2, queue, partition, origin] if incarnation is None
                else [RECEIPT_VERSION, queue, partition, origin, incarnation])
        self._prefix = msgpack.packb([*head, 0, 0, 0], use_bin_type=True)[:-3]

    def read(self, text: Any) -> tuple[int, int] | None:
        """``(seq, receive_count)`` of a receipt of this encoder's stream, whose
        constant part matches this one byte for byte, so only its tail is
        unpacked (a delete batch is one stream's receipts); None for a
        receipt of any other stream (decode it in full). InvalidReceipt if
        malformed."""
        body = _receipt_body(text)
        prefix = self._prefix
        if not body.startswith(prefix):
            return None
        try:
            seq, rc, epoch = msgpack.unpackb(b"\x93" + body[len(prefix):])
        except Exception:
            raise _bad_receipt() from None
        if type(seq) is not int or type(rc) is not int or type(epoch) is not int or min(seq, rc, epoch) < 0:
            raise _bad_receipt()
        return seq, rc

    def __call__(self, seq: int, receive_count: int, epoch: int) -> str:
        raw = self._prefix + _pack((seq, receive_count, epoch))[1:]  # without its array header
        raw += zlib.crc32(raw).to_bytes(4, "big")
        return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode()


def _bad_receipt() -> InvalidReceipt:
    """Built only when raised: an exception object costs microseconds, and
    :meth:`Receipt.decode` runs per receipt on both sides."""
    return InvalidReceipt("the receipt handle is malformed; use the receipt of a received message")
