"""The rules for messages a receive took beyond ``max_messages``
(:mod:`zmqueue.client.leftovers`): handed out only in the first half of their
visibility timeout (never in its last second), never across a queue's
incarnations, and on FIFO never after a message of their group was handed out."""

from __future__ import annotations

from datetime import UTC, datetime

from zmqueue.client.leftovers import Leftovers, keep_for
from zmqueue.client.models import Message
from zmqueue.protocol import Receipt


def _msg(body: str, group: str | None = None, incarnation: int | None = 7) -> Message:
    receipt = Receipt("q", 0, "fifo" if group else "h1", 1, 1, 0, incarnation).encode()
    return Message(body, body.encode(), {}, receipt, 1, datetime.now(UTC), group, "q")


def _bodies(msgs: list[Message]) -> list[bytes]:
    return [m.body for m in msgs]


def test_a_kept_message_is_handed_out_only_in_the_first_half_of_its_visibility_timeout() -> None:
    assert keep_for(30) == 15 and keep_for(2) == 1 and keep_for(1) <= 0 and keep_for(0) <= 0
    kept = Leftovers(fifo=False)
    out, release = kept.split([_msg("a"), _msg("b"), _msg("c")], 1, taken_at=100.0, visibility_s=30)
    assert _bodies(out) == [b"a"] and release == [] and len(kept) == 2
    assert _bodies(kept.take(1, 114.9, 7)[0]) == [b"b"]
    assert kept.take(1, 115.0, 7) == ([], []) and not kept  # dropped: comes back through the queue


def test_nothing_is_kept_when_the_visibility_timeout_leaves_no_time_to_act() -> None:
    kept = Leftovers(fifo=False)
    out, _ = kept.split([_msg("a"), _msg("b")], 1, taken_at=100.0, visibility_s=1)
    assert _bodies(out) == [b"a"] and not kept


def test_a_kept_message_of_another_incarnation_of_the_queue_is_dropped() -> None:
    kept = Leftovers(fifo=False)
    kept.split([_msg("a"), _msg("old", incarnation=7), _msg("v2", incarnation=None)], 1, 0.0, 60)
    out, _ = kept.take(10, 1.0, 8)  # the queue was deleted and created again
    assert _bodies(out) == [b"v2"]  # (a receipt without an incarnation: not known to be older)
    kept.split([_msg("a"), _msg("b", incarnation=7)], 1, 0.0, 60)
    assert _bodies(kept.take(10, 1.0, None)[0]) == [b"b"]  # the queue's incarnation not known


def test_fifo_a_message_handed_out_releases_the_kept_ones_of_its_group() -> None:
    kept = Leftovers(fifo=True)
    msgs = [_msg("a0", "A"), _msg("a1", "A"), _msg("b0", "B"), _msg("b1", "B"), _msg("c0", "C")]
    out, release = kept.split(msgs, 1, 0.0, 60)
    assert _bodies(out) == [b"a0"] and _bodies(release) == [b"a1"]
    out, release = kept.take(1, 1.0, 7)  # b1 must not follow b0 if the caller fails on b0
    assert _bodies(out) == [b"b0"] and _bodies(release) == [b"b1"]
    assert _bodies(kept.take(10, 1.0, 7)[0]) == [b"c0"] and not kept


def test_fifo_messages_of_one_group_handed_out_together_stay_in_order() -> None:
    kept = Leftovers(fifo=True)
    kept.split([_msg("x"), _msg("a0", "A"), _msg("a1", "A"), _msg("a2", "A")], 1, 0.0, 60)
    out, release = kept.take(2, 1.0, 7)
    assert _bodies(out) == [b"a0", b"a1"] and _bodies(release) == [b"a2"] and not kept


def test_a_kept_message_taken_with_another_visibility_timeout_is_named_to_re_time() -> None:
    kept = Leftovers(fifo=False)
    kept.split([_msg("a"), _msg("b"), _msg("c")], 1, 0.0, 30)
    kept.split([_msg("x"), _msg("d")], 1, 0.0, 120)
    out, release, retime = kept.take_for(2, 1.0, 7, 120)  # asks for 120 s: b and c were taken with 30
    assert _bodies(out) == [b"b", b"c"] and release == [] and _bodies(retime) == [b"b", b"c"]
    out, _, retime = kept.take_for(5, 1.0, 7, 120)
    assert _bodies(out) == [b"d"] and retime == []  # taken with 120 s: its deadline is kept
    kept.split([_msg("x"), _msg("e")], 1, 0.0, 30)
    assert kept.take_for(5, 1.0, 7, None)[2] == []  # (None: nothing named)
