"""Parked long polls (``Waiters``) against a plain reference: messages go to
the waiters in the order they parked, a waiter whose wait ran out gets an
empty answer at the first pass at or after its deadline, a cancelled one at
once, and the pass's wake-up time is never later than the next deadline or
the stream's next visibility time (the host would oversleep it) and never
0 or less (the host would spin).

The waiters are swept for deadlines only when the earliest one passed (a
host pass used to scan every waiter of the partition), so the random
sequences below mix parks, cancels, arriving messages and time steps of
every size around the deadlines."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.unit.partstubs import PART, Svc, request
from zmqueue import protocol
from zmqueue.dataplane.dispatch import Request
from zmqueue.dataplane.partwatch import RECHECK_MS
from zmqueue.dataplane.waiting import Waiters
from zmqueue.errors import NotLeader

ops = st.lists(st.one_of(
    st.tuples(st.just("park"), st.integers(1, 40), st.integers(1, 3)),  # wait ms, max messages
    st.tuples(st.just("send"), st.integers(1, 4)),
    st.tuples(st.just("send_late"), st.integers(1, 4)),  # after the pass's serve (housekeeping, DLQ)
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("time"), st.integers(0, 25)),
    st.tuples(st.just("wake_at"), st.integers(1, 60)),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
@example([("park", 5, 1), ("time", 5)])  # a deadline reached exactly
@example([("park", 30, 1), ("park", 5, 1), ("time", 4), ("time", 1)])  # an earlier deadline parked later
@example([("park", 40, 1), ("send_late", 1), ("time", 1)])  # a change after the serve: the next pass
def test_waiters_answer_in_order_on_time_and_never_oversleep(steps: list[tuple[Any, ...]]) -> None:
    waiters, svc, now = Waiters(), Svc(), 1000
    reqs: list[Request] = []
    # the reference: parked (request index, deadline, max), in park order
    parked: list[tuple[int, int, int]] = []
    expected: dict[int, list[int]] = {}
    handed = available = late = 0
    for op in steps:
        if op[0] == "park":
            req = request(len(reqs))
            reqs.append(req)
            waiters.park(PART, req, op[2], None, now + op[1])
            parked.append((len(reqs) - 1, now + op[1], op[2]))
        elif op[0] == "send":
            svc.store.available += op[1]
            svc.change()
            available += op[1]
        elif op[0] == "cancel" and reqs:
            i = op[1] % len(reqs)
            found = waiters.cancel(reqs[i].identity, reqs[i].frame.request_id)
            assert found == any(p[0] == i for p in parked)
            if found:
                parked = [p for p in parked if p[0] != i]
                expected[i] = []
        elif op[0] == "time":
            now += op[1]
        elif op[0] == "wake_at":  # (a change of a deadline: a request marked the stream)
            svc.store.wake = now + op[1]
            svc.change()
        wake = waiters.serve(cast(Any, svc), now)
        available += late  # (a late change of the pass before: this pass serves it)
        late = 0
        if op[0] == "send_late":  # changed after the serve, before the commit
            svc.store.available += op[1]
            svc.change()
            late = op[1]
        svc.flush(waiters)
        # the reference pass: messages to the first parked, then deadlines
        while parked and available:
            i, _, max_n = parked.pop(0)
            k = min(max_n, available)
            expected[i] = list(range(handed, handed + k))
            handed += k
            available -= k
        for p in [p for p in parked if p[1] <= now]:
            parked.remove(p)
            expected[p[0]] = []
        assert svc.handed == handed
        for i, req in enumerate(reqs):
            assert req.answered == (i in expected), (i, expected)
        assert waiters.total == waiters.count(PART) == len(parked) == len(waiters.where)
        if not parked:
            assert wake is None
            continue
        assert wake is not None and wake >= 1
        soonest = min(p[1] for p in parked)
        stream_wake = svc.store.next_wakeup_ms(now)
        if stream_wake is not None:
            soonest = min(soonest, stream_wake)
        assert wake <= soonest - now, (wake, soonest, now)
    assert waiters.watch.late == 0  # every change reached the waiters by the pass's changed streams
    # every answer carried what the reference handed to that waiter, once
    for i, req in enumerate(reqs):
        sent = [protocol.decode(payload).body["m"] for _, _, payload in req.outbox.items]
        assert sent == ([expected[i]] if i in expected else []), (i, sent)


def test_a_change_no_path_reports_is_served_by_the_recheck_and_counted() -> None:
    waiters, svc = Waiters(), Svc()
    req = request(1)
    waiters.park(PART, req, 5, None, 1000 + 20_000)
    assert waiters.serve(cast(Any, svc), 1000) == RECHECK_MS
    svc.store.available = 2  # not marked changed (a path that forgot to)
    for now in (1001, 1500, 1999):
        waiters.serve(cast(Any, svc), now)
        assert not req.answered
    waiters.serve(cast(Any, svc), 2000)
    assert req.answered and waiters.watch.late == 1
    assert [protocol.decode(p).body["m"] for _, _, p in req.outbox.items] == [[0, 1]]


def test_a_pass_looks_only_at_partitions_that_changed_or_are_due() -> None:
    """A partition nothing happened to is not asked again before its timer."""
    waiters, svc = Waiters(), Svc()
    asked: list[int] = []
    store = svc.store
    real = store.has_visible

    def counting(now: int) -> bool:
        asked.append(now)
        return real(now)

    store.has_visible = counting  # type: ignore[method-assign]
    waiters.park(PART, request(1), 1, None, 1000 + 300)
    waiters.serve(cast(Any, svc), 1000)
    svc.flush(waiters)
    assert asked == [1000]
    for now in range(1001, 1300, 7):  # quiet passes: nothing changed, nothing due
        waiters.serve(cast(Any, svc), now)
        svc.flush(waiters)
    assert asked == [1000]
    svc.store.available = 1
    svc.change()  # a send
    waiters.serve(cast(Any, svc), 1301 - 1)
    assert asked == [1000, 1300] and waiters.total == 0


def test_a_new_set_of_streams_is_looked_at_at_once() -> None:
    """A stream opened (or closed) changes what a partition can serve without
    a request: every partition is looked at in that pass."""
    waiters, svc = Waiters(), Svc()
    req = request(1)
    waiters.park(PART, req, 1, None, 1000 + 20_000)
    waiters.serve(cast(Any, svc), 1000)
    svc.store.available = 1  # what the opened stream holds
    svc.set.version += 1
    waiters.serve(cast(Any, svc), 1001)
    assert req.answered and waiters.watch.late == 0


def test_a_partition_answered_or_failed_at_once_leaves_nothing_to_cancel() -> None:
    """(a stream deposed or gone: its waiters are answered empty or failed)"""
    waiters, other = Waiters(), ("q", 1)
    reqs = [request(i) for i in range(4)]
    for i, req in enumerate(reqs):
        waiters.park(PART if i < 2 else other, req, 1, None, 10_000)
    waiters.answer_all(PART)
    waiters.fail_partition(other, NotLeader("moved", leader=None, endpoint=None))
    assert all(r.answered for r in reqs) and waiters.where == {}
    assert not waiters.cancel(reqs[0].identity, reqs[0].frame.request_id)
