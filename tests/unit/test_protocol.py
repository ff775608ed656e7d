"""Wire protocol v1: round trips, and defensive decoding of garbage."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqueue
from zmqueue import errors, protocol
from zmqueue.errors import ErrorCode, ProtocolError, UnknownCommand, UnsupportedVersion
from zmqueue.protocol import Command, Flags


def test_a_request_round_trips_with_its_command_id_and_body() -> None:
    body = {"q": "orders", "m": [[b"\x00body", {"k": "v"}, 0, None, None]]}
    f = protocol.decode(protocol.encode_request(Command.SEND, 12345, body))
    assert f.command is Command.SEND and f.request_id == 12345 and f.body == body
    assert f.flags == Flags.NONE


def test_an_error_reply_decodes_to_the_same_exception_class_with_details() -> None:
    exc = errors.MessageTooLarge("too big", size=300000, limit=262144)
    f = protocol.decode(protocol.encode_error(Command.SEND, 9, exc))
    assert f.is_error and f.flags & Flags.REPLY
    back = errors.from_wire(f.body)
    assert type(back) is errors.MessageTooLarge
    assert back.details == {"size": 300000, "limit": 262144}


def test_every_error_code_maps_to_exactly_one_exception_class() -> None:
    for code in ErrorCode:
        cls = type(errors.from_wire({"code": int(code), "message": "m"}))
        assert cls.code == code, code


def _user_guide_exceptions() -> list[str]:
    """The class names in docs/USER_GUIDE.md's table under "### Errors" (its
    first column: each name in backticks, subclasses in brackets)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "USER_GUIDE.md").read_text(encoding="utf-8")
    section = text.split("\n### Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])]


def test_every_exception_the_user_guide_lists_is_exported_from_zmqueue() -> None:
    """The guide says every exception is exported from ``zmqueue``
    (CircuitOpen and BulkheadFull live in zmqueue.client.breaker)."""
    names = _user_guide_exceptions()
    assert {"InvalidParameter", "CircuitOpen", "BulkheadFull", "NotSent"} <= set(names), names  # parsed
    for name in names:
        assert name in zmqueue.__all__, name
        cls = getattr(zmqueue, name)
        assert isinstance(cls, type) and issubclass(cls, zmqueue.ZmqueueError), name


def test_an_unknown_error_code_becomes_an_internal_error() -> None:
    assert type(errors.from_wire({"code": 999, "message": "x"})) is errors.InternalError
    assert type(errors.from_wire("nonsense")) is errors.ProtocolError


def test_a_frame_of_another_version_is_refused_with_a_clear_error() -> None:
    data = bytearray(protocol.encode_request(Command.PING, 1))
    data[2] = 9
    with pytest.raises(UnsupportedVersion, match="version 9"):
        protocol.decode(bytes(data))


def test_an_unknown_command_is_refused() -> None:
    data = bytearray(protocol.encode_request(Command.PING, 1))
    data[3] = 250
    with pytest.raises(UnknownCommand):
        protocol.decode(bytes(data))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=256))
def test_decoding_arbitrary_bytes_raises_only_protocol_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        protocol.decode(data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(Command)), st.integers(0, 2**64 - 1), st.binary(max_size=200))
def test_a_valid_header_with_a_random_body_never_raises_anything_else(
        cmd: Command, rid: int, tail: bytes) -> None:
    data = protocol.HEADER.pack(protocol.MAGIC, protocol.VERSION, int(cmd), 0, rid) + tail
    try:
        f = protocol.decode(data)
    except ProtocolError:
        assert protocol.peek_header(data) == (int(cmd), rid)
    else:
        assert f.request_id == rid


def test_request_ids_count_up_stay_in_range_and_never_repeat_across_threads() -> None:
    import threading

    from zmqueue.protocol import RequestIds

    ids = RequestIds()
    first, second = ids.next(), ids.next()
    assert second == (first + 1) % 2**63
    seen: list[list[int]] = [[] for _ in range(4)]

    def take(i: int) -> None:
        seen[i] = [ids.next() for _ in range(10_000)]

    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    every = [x for part in seen for x in part]
    assert len(set(every)) == 40_000 and all(0 <= x < 2**63 for x in every)
    assert RequestIds().next() != RequestIds().next()  # random starts (63 bits)


def _reference_receipt(queue: str, part: int, origin: str, seq: int, rc: int, epoch: int) -> str:
    """The receipt format as documented (PROTOCOL.md), spelled out with the
    standard library: the encoder's fast path must produce exactly this."""
    import base64
    import zlib

    import msgpack

    raw = msgpack.packb([2, queue, part, origin, seq, rc, epoch], use_bin_type=True)
    raw += zlib.crc32(raw).to_bytes(4, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@settings(max_examples=300, deadline=None)
@given(queue=st.text(min_size=1, max_size=80), part=st.integers(0, 2**16),
       origin=st.text(min_size=1, max_size=40), seq=st.integers(0, 2**64 - 1),
       rc=st.integers(0, 2**32 - 1), epoch=st.integers(0, 2**63 - 1))
def test_receipts_round_trip_in_the_documented_format(queue: str, part: int, origin: str, seq: int,
                                                      rc: int, epoch: int) -> None:
    from zmqueue.protocol import Receipt, ReceiptEncoder

    text = ReceiptEncoder(queue, part, origin)(seq, rc, epoch)
    assert text == _reference_receipt(queue, part, origin, seq, rc, epoch)
    assert text == Receipt(queue, part, origin, seq, rc, epoch).encode()
    assert Receipt.decode(text) == Receipt(queue, part, origin, seq, rc, epoch)
    assert ReceiptEncoder(queue, part, origin).read(text) == (seq, rc)  # the tail-only read
    assert ReceiptEncoder(queue, part, origin + "x").read(text) is None  # another stream's
    assert ReceiptEncoder(queue, part + 1, origin).read(text) is None


@pytest.mark.parametrize("mangle", [
    lambda t: t[:-1],                      # torn
    lambda t: t[:10] + ("A" if t[10] != "A" else "B") + t[11:],  # a flipped character
    lambda t: t + "é",                     # not ASCII
    lambda t: "x" * 7,                     # too short
])
def test_mangled_receipts_are_refused_with_invalid_receipt(mangle: Any) -> None:
    from zmqueue.errors import InvalidReceipt
    from zmqueue.protocol import Receipt, ReceiptEncoder

    good = Receipt("q", 1, "h1", 42, 1, 3).encode()
    with pytest.raises(InvalidReceipt):
        Receipt.decode(mangle(good))
    with pytest.raises(InvalidReceipt):
        ReceiptEncoder("q", 1, "h1").read(mangle(good))


def test_a_message_from_the_wire_is_the_message_its_constructor_builds() -> None:
    import dataclasses
    from datetime import UTC, datetime

    from zmqueue.client.models import Message

    item = ["ab" * 16, b"body", {"k": 1}, "receipt", 3, 1_700_000_000_123, "g", "src-q"]
    m = Message.from_wire("q", item)
    assert m == Message(id="ab" * 16, body=b"body", attributes={"k": 1}, receipt="receipt", receive_count=3,
                       sent_at=datetime.fromtimestamp(1_700_000_000.123, tz=UTC), group_id="g", queue="q",
                       dead_letter_source="src-q")
    assert set(vars(m)) == {f.name for f in dataclasses.fields(Message)}  # every field set
    assert Message.from_wire("q", [*item[:2], None, *item[3:]]).attributes == {}


def test_messages_from_a_column_group_are_the_messages_the_constructor_builds() -> None:
    """A column group's messages build their receipt (the text the host's
    encoder gives) and sent_at only when read, and then equal the
    constructor's; each has its own attributes dict; a torn group is a
    ProtocolError."""
    import dataclasses
    from datetime import UTC, datetime

    from zmqueue.client.models import Message, StreamRef
    from zmqueue.protocol import Receipt, ReceiptEncoder

    stream = StreamRef(2, "h1", 7, ReceiptEncoder("q", 2, "h1"))
    ids = bytes(range(16)) + bytes(range(16, 32))
    group = ["h1", 7, ids, [b"a", b"b"], [40, 41], [1, 3], [1_700_000_000_123, 1_700_000_000_456]]
    a, b = Message.from_columns("q", stream, group)
    assert "receipt" not in vars(a) and "sent_at" not in vars(a)
    assert b == Message(id=ids[16:].hex(), body=b"b", attributes={},
                        receipt=Receipt("q", 2, "h1", 41, 3, 7).encode(), receive_count=3,
                        sent_at=datetime.fromtimestamp(1_700_000_000.456, tz=UTC), queue="q")
    assert a.id == ids[:16].hex() and Receipt.decode(a.receipt) == Receipt("q", 2, "h1", 40, 1, 7)
    assert a.attributes is not b.attributes
    assert dataclasses.replace(a, body=b"x").receipt == a.receipt
    with pytest.raises(AttributeError):
        _ = a.no_such_field  # type: ignore[attr-defined]
    for torn in (group[:6], [*group[:2], ids[:20], *group[3:]], [*group[:4], [40], *group[5:]]):
        with pytest.raises(ProtocolError, match="column group"):
            Message.from_columns("q", stream, torn)


def test_receipts_are_grouped_by_stream_in_order_and_results_land_at_their_indexes() -> None:
    """Queue.by_stream groups received messages (column-read, of two streams
    interleaved) and receipt texts by (partition, origin), keeping each
    stream's order; outcomes puts each host result at its receipt's index
    and refuses a results list of the wrong shape."""
    from zmqueue.client.models import Message, StreamRef
    from zmqueue.client.queue import Queue
    from zmqueue.client.receipts import outcomes
    from zmqueue.config import QueueConfig
    from zmqueue.errors import InvalidReceipt
    from zmqueue.protocol import Receipt, ReceiptEncoder

    def group(origin: str, seqs: list[int]) -> list[Any]:
        n = len(seqs)
        return [origin, 1, bytes(16 * n), [b"x"] * n, seqs, [1] * n, [0] * n]

    s1 = StreamRef(0, "h1", 1, ReceiptEncoder("q", 0, "h1"))
    s2 = StreamRef(1, "h2", 1, ReceiptEncoder("q", 1, "h2"))
    a = Message.from_columns("q", s1, group("h1", [1, 2]))
    b = Message.from_columns("q", s2, group("h2", [5, 6]))
    text = Receipt("q", 0, "h1", 9, 1, 1).encode()
    queue = object.__new__(Queue)
    queue.name, queue._reader = "q", (None, (0, ""))
    queue.config = QueueConfig("q", partitions=2)
    items: list[str | Message] = [a[0], b[0], a[1], text, b[1]]
    assert queue.by_stream(items) == {(0, "h1"): [0, 2, 3], (1, "h2"): [1, 4]}
    # version-3 receipts (with the queue's incarnation), of two incarnations: grouped by stream
    # all the same (the host tells an earlier queue's receipt apart)
    v3 = [Receipt("q", 1, "h2", s, 1, 1, incarnation=i).encode() for s, i in ((3, 7), (4, 7), (5, 6))]
    assert queue.by_stream(v3) == {(1, "h2"): [0, 1, 2]}
    with pytest.raises(InvalidReceipt, match="names partition 2, but queue 'q' has 2"):
        queue.by_stream([Receipt("q", 2, "h1", 9, 1, 1).encode()])  # not one this queue handed out

    out: list[errors.ZmqueueError | None] = [None] * 4
    outcomes([0, 2], [None, {"code": int(ErrorCode.INVALID_RECEIPT), "message": "stale"}], out)
    assert out[0] is None and isinstance(out[2], InvalidReceipt) and out[1] is None
    outcomes([1, 3], [None, None], out)
    assert out[1] is None and out[3] is None
    for bad in ([None], None, "x"):
        with pytest.raises(ProtocolError, match="malformed results"):
            outcomes([1, 3], bad, out)  # type: ignore[arg-type]


def test_a_streams_deletes_go_by_reference_only_if_every_one_was_column_read_of_one_incarnation() -> None:
    """stream_groups builds each stream's ``dref`` (origin, seqs, receive
    counts) while it groups: a stream whose batch holds a receipt text, a
    list-read message or messages of two queue incarnations goes as receipt
    texts (``del``); each group keeps its items in the caller's order."""
    from zmqueue.client.models import Message, StreamRef
    from zmqueue.client.queue import Queue
    from zmqueue.client.receipts import stream_groups
    from zmqueue.config import QueueConfig
    from zmqueue.protocol import Receipt, ReceiptEncoder

    def group(origin: str, seqs: list[int], count: int) -> list[Any]:
        n = len(seqs)
        return [origin, 1, bytes(16 * n), [b"x"] * n, seqs, [count] * n, [0] * n]

    def stream(p: int, origin: str, inc: int | None) -> StreamRef:
        return StreamRef(p, origin, 1, ReceiptEncoder("q", p, origin, inc), inc)

    queue = object.__new__(Queue)
    queue.name, queue._reader = "q", (None, (0, ""))
    queue.config = QueueConfig("q", partitions=3)
    a = Message.from_columns("q", stream(0, "h1", 7), group("h1", [1, 2], 1))
    a2 = Message.from_columns("q", stream(0, "h1", 7), group("h1", [3], 2))  # another reply, same stream
    b = Message.from_columns("q", stream(1, "h2", 7), group("h2", [5, 6], 3))
    c_old = Message.from_columns("q", stream(2, "h3", 6), group("h3", [8], 1))
    c_new = Message.from_columns("q", stream(2, "h3", 7), group("h3", [9], 1))
    text = Receipt("q", 1, "h2", 9, 1, 1, incarnation=7).encode()
    items: list[str | Message] = [a[0], b[0], c_old[0], a2[0], a[1], b[1], c_new[0], text]
    groups = stream_groups(queue, items)
    assert list(groups) == [(0, "h1"), (1, "h2"), (2, "h3")]
    g = groups[(0, "h1")]
    assert g.idxs == [0, 3, 4] and g.items == [a[0], a2[0], a[1]]
    assert g.dref("h1") == ["h1", [1, 3, 2], [1, 2, 1]] and g.incarnation == 7
    carry = g.carry(0, "h1")
    assert (carry.field, carry.items, carry.idxs, carry.incarnation) == ("dref", ["h1", [1, 3, 2], [1, 2, 1]],
                                                                         [0, 3, 4], 7)
    for (p, origin), g in list(groups.items())[1:]:  # a receipt text; two incarnations
        assert g.dref(origin) is None
        carry = g.carry(p, origin)
        assert carry.field == "del"
        assert carry.items == [r if isinstance(r, str) else r.receipt for r in g.items]
    assert groups[(1, "h2")].idxs == [1, 5, 7] and groups[(2, "h3")].idxs == [2, 6]
    assert queue.by_stream(items) == {key: g.idxs for key, g in groups.items()}


def test_send_replies_give_their_ids_as_hex_texts_in_order() -> None:
    ids = bytes(range(48))
    texts = [ids[i:i + 16].hex() for i in (0, 16, 32)]
    assert protocol.sent_ids({"ib": ids}) == texts
    assert protocol.sent_ids({"ids": texts}) == texts
    assert protocol.sent_ids({"ib": ids[:20]}) is None, "not whole ids"
    assert protocol.sent_ids({"n": 3}) is None and protocol.sent_ids(None) is None


def test_only_an_older_hosts_refusal_of_plain_bodies_is_taken_for_one() -> None:
    from zmqueue.errors import InvalidParameter, MessageTooLarge

    older = InvalidParameter("messages must be a list of 1 to 1000 items", field="messages")
    assert protocol.refused_plain_bodies(older)
    assert not protocol.refused_plain_bodies(InvalidParameter("message 1: body must be bytes", field="body"))
    assert not protocol.refused_plain_bodies(InvalidParameter("bodies must be a list", field="bodies"))
    assert not protocol.refused_plain_bodies(MessageTooLarge("too large", size=2, limit=1))


def test_receipts_carry_the_queue_incarnation_and_version_2_handles_are_still_read() -> None:
    from zmqueue.protocol import Receipt, ReceiptEncoder

    v3 = Receipt("q", 1, "n1", 5, 2, 3, incarnation=77)
    v2 = Receipt("q", 1, "n1", 5, 2, 3)
    assert Receipt.decode(v3.encode()) == v3 and Receipt.decode(v2.encode()) == v2
    assert Receipt.decode(v2.encode()).incarnation is None
    assert v3.encode() != Receipt("q", 1, "n1", 5, 2, 3, incarnation=78).encode()
    # a stream's encoder reads the tails of its own incarnation's receipts only: the others
    # (an earlier queue's, or version 2) are decoded in full, where the incarnation is checked
    enc = ReceiptEncoder("q", 1, "n1", 77)
    assert enc(5, 2, 3) == v3.encode()
    assert enc.read(v3.encode()) == (5, 2)
    assert enc.read(v2.encode()) is None
    assert enc.read(Receipt("q", 1, "n1", 5, 2, 3, incarnation=76).encode()) is None
    assert ReceiptEncoder("q", 1, "n1").read(v2.encode()) == (5, 2)
    with pytest.raises(errors.InvalidReceipt):
        Receipt.decode(Receipt("q", 1, "n1", 5, 2, 3, incarnation=-1).encode())


def _body_frame(body: bytes) -> bytes:
    return protocol.HEADER.pack(protocol.MAGIC, protocol.VERSION, int(Command.SEND), 0, 1) + body


@pytest.mark.parametrize("body", [
    b"\xdd" + (3 << 20).to_bytes(4, "big") + b"\x90" * (3 << 20),  # 3 M empty arrays in one (56 B each)
    # 5 arrays of 65,535 two-letter strings: no one array too long, too many in all
    b"\x95" + (b"\xdc\xff\xff" + b"\xa2ab" * 65535) * 5,
    b"\x91" * 50 + b"\xdf" + (300_000).to_bytes(4, "big") + b"\x01\x90" * 300_000,  # nested, a map
])
def test_a_request_body_of_too_many_values_is_refused_before_it_is_built(body: bytes) -> None:
    """(A few MB of one-byte empty arrays decoded into a Python list each,
    ~70x the frame in memory and seconds with the GIL held: a host stalled past
    its health checks and lost its leadership locks.)"""
    with pytest.raises(ProtocolError, match=r"more than 262144 values .*split the request"):
        protocol.decode(_body_frame(body), max_items=protocol.MAX_REQUEST_ITEMS)
    protocol.decode(_body_frame(body))  # (replies and peers' frames are not counted)


def test_a_large_request_of_few_values_decodes_as_before() -> None:
    body = {"q": "x", "m": [{"b": b"x" * 300, "a": {f"k{i}": "v" for i in range(10)}} for _ in range(1000)],
            "big": [b"y" * 1000] * 2000}
    data = protocol.encode_request(Command.SEND, 5, body)
    assert len(data) > protocol.MAX_REQUEST_ITEMS  # (counted: the body is larger than the bound)
    assert protocol.decode(data, max_items=protocol.MAX_REQUEST_ITEMS).body == body
    small = protocol.encode_request(Command.SEND, 6, [0] * 1000)  # under the bound in bytes: not counted
    assert protocol.decode(small, max_items=1000).body == [0] * 1000
