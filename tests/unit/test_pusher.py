"""Push subscribers (``Pusher``): a host pass pushes to the subscribers of
the partitions that changed in it, whose credit came back or whose
visibility time is due, and looks at no other (see partwatch); a change no
path reports is pushed by the once-a-second recheck and counted."""

from __future__ import annotations

from typing import Any, cast

from tests.unit.partstubs import PART, Svc
from zmqueue import protocol
from zmqueue.dataplane.dispatch import Outbox
from zmqueue.dataplane.partwatch import RECHECK_MS
from zmqueue.dataplane.pushing import PUSH_BATCH_MAX, Pusher


class PushSvc(Svc):
    """The waiters' plain service, its messages as wire lists ``[n, body,
    attributes, receipt, receive count]`` (what a push reads the counts of)."""

    def take(self, streams: list[Any], max_n: int, vis_s: int | None, now: int, cols: bool) -> dict[str, Any]:
        got = super().take(streams, max_n, vis_s, now, cols)
        return {"m": [[n, b"", {}, f"r{n}", 1] for n in got["m"]]}


def pushed(out: Outbox) -> list[int]:
    """The message numbers of every DELIVER in the outbox, in order (then emptied)."""
    return [m[0] for _, _, payload in out.take() for m in protocol.decode(payload).body["m"]]


def setup(prefetch: int) -> tuple[Pusher, Svc, Outbox, int]:
    pusher, svc, out = Pusher(), PushSvc(), Outbox()
    pusher.outbox = out
    sub = pusher.subscribe(PART, b"client-1", prefetch, None)
    return pusher, svc, out, sub


def one_pass(pusher: Pusher, svc: Svc, now: int) -> None:
    pusher.push_all(cast(Any, svc), now)
    pusher.watch.note_changed(svc.dirty)  # what the service's commit hands over
    svc.dirty.clear()


def test_sends_credits_and_large_backlogs_are_pushed_without_a_look_at_quiet_partitions() -> None:
    pusher, svc, out, sub = setup(prefetch=3)
    asked: list[int] = []
    real = svc.store.has_visible

    def counting(now: int) -> bool:
        asked.append(now)
        return real(now)

    svc.store.has_visible = counting  # type: ignore[method-assign]
    one_pass(pusher, svc, 1000)  # subscribed: looked at once
    assert asked == [1000] and pushed(out) == []
    for now in range(1001, 1100, 9):  # quiet passes
        one_pass(pusher, svc, now)
    assert asked == [1000]
    svc.store.available = 5
    svc.change()  # a send in this pass: pushed in it, up to the credit
    one_pass(pusher, svc, 1100)
    assert pushed(out) == [0, 1, 2]
    looked: list[object] = []
    streams_of = svc.set.led_streams

    def looking(part: object) -> Any:
        looked.append(part)
        return streams_of(part)

    svc.set.led_streams = looking
    one_pass(pusher, svc, 1101)  # out of credit: nothing, whatever is visible, and its
    assert pushed(out) == [] and looked == []  # streams are not even looked up
    for now in range(1102, 1100 + RECHECK_MS, 97):  # nor by a timer: only credit back touches it
        one_pass(pusher, svc, now)
    assert looked == []
    t = 1100 + RECHECK_MS - 1
    pusher.add_credit(sub, b"client-1", 3)
    one_pass(pusher, svc, t)
    assert pushed(out) == [3, 4] and looked == [PART]
    pusher.add_credit(sub, b"client-1", 3)
    svc.store.available = 3 * PUSH_BATCH_MAX
    svc.change()
    pusher.subs[sub].prefetch = pusher.subs[sub].credit = 10 * PUSH_BATCH_MAX
    for now in range(t + 1, t + 4):  # a batch per pass: each take marks the stream changed
        one_pass(pusher, svc, now)
        assert len(pushed(out)) == PUSH_BATCH_MAX
    assert pusher.watch.late == 0


def test_a_change_no_path_reports_is_pushed_by_the_recheck_and_counted() -> None:
    pusher, svc, out, _ = setup(prefetch=10)
    one_pass(pusher, svc, 1000)
    svc.store.available = 2  # not marked changed
    one_pass(pusher, svc, 1000 + RECHECK_MS - 1)
    assert pushed(out) == []
    one_pass(pusher, svc, 1000 + RECHECK_MS)
    assert pushed(out) == [0, 1] and pusher.watch.late == 1


def test_idle_subscribers_are_dropped_and_forgotten() -> None:
    pusher, svc, _, sub = setup(prefetch=10)
    other = pusher.subscribe(("q", 1), b"client-2", 10, None)
    one_pass(pusher, svc, 1000)
    assert set(pusher.watch.timer) == {PART, ("q", 1)}
    pusher.subs[sub].last_seen -= 60
    pusher.next_expiry = 0.0
    one_pass(pusher, svc, 1001)
    assert list(pusher.subs) == [other] and list(pusher.by_part) == [("q", 1)]
    assert set(pusher.watch.timer) == {("q", 1)}


def test_the_pass_wakes_the_host_for_a_visibility_time_not_later() -> None:
    """A message whose visibility time runs out is pushed when it does: the
    pass's answer bounds the host's next poll (it used to sleep up to 50 ms on)."""
    pusher, svc, out, _ = setup(prefetch=10)
    svc.store.wake = 1030  # an in-flight message becomes visible again at 1030
    assert pusher.push_all(cast(Any, svc), 1000) == 30
    svc.store.wake = None
    assert pusher.push_all(cast(Any, svc), 1001) == 29  # (nothing looked at: the timer stands)
    svc.store.available = 1
    one_pass(pusher, svc, 1030)
    assert pushed(out) == [0]
    # the push changed the stream: looked at again, then nothing due but the
    # recheck (the wake may come a ms early: the pass at 1030 queued its recheck)
    assert pusher.push_all(cast(Any, svc), 1031) in (RECHECK_MS - 1, RECHECK_MS)
