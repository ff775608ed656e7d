"""``PartWatch`` finds its due partitions from a heap of timers; it must name
exactly the partitions a walk over every watched one would (touched, changed
in the pass, all when the set of streams changed, timer passed), with the
same "only the recheck brought it" flag, and its wake-up must never come
after the earliest timer (the host would oversleep it)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from zmqueue.dataplane.partwatch import RECHECK_MS, PartWatch

PARTS = [("q", i) for i in range(5)]

op = st.one_of(
    st.tuples(st.just("watch"), st.integers(0, 4)),
    st.tuples(st.just("unwatch"), st.integers(0, 4)),
    st.tuples(st.just("touch"), st.integers(0, 4)),
    st.tuples(st.just("change"), st.integers(0, 4)),  # a request of the pass changed a stream of it
    st.tuples(st.just("streams"), st.just(0)),  # streams opened or closed
    st.tuples(st.just("time"), st.integers(0, 4)),  # (x 300 ms, plus up to 299)
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(op, st.lists(st.integers(1, 1200), min_size=5, max_size=5)), max_size=60))
def test_the_heap_names_what_a_walk_over_every_partition_would(
        steps: list[tuple[tuple[str, int], list[int]]]) -> None:
    watched: dict[tuple[str, int], int] = {}
    watch = PartWatch("a test", watched)
    svc = SimpleNamespace(set=SimpleNamespace(version=0), dirty=set())
    timers: dict[tuple[str, int], tuple[int, bool]] = {}  # the reference's
    touched: set[tuple[str, int]] = set()
    version_seen = -1
    now = 1000
    for (kind, i), deadlines in steps:
        part = PARTS[i % len(PARTS)]
        if kind == "watch" and part not in watched:
            watched[part] = 1
            watch.touch(part)  # (as Waiters.park and Pusher.subscribe do)
            touched.add(part)
        elif kind == "unwatch" and part in watched:
            del watched[part]
            watch.forget(part)
            timers.pop(part, None)
            touched.discard(part)
        elif kind == "touch":
            watch.touch(part)
            if part in watched:
                touched.add(part)
        elif kind == "change":
            svc.dirty.add((*part, "o"))
        elif kind == "streams":
            svc.set.version += 1
        elif kind == "time":
            now += i * 300 + deadlines[0] % 300
        # the reference: a walk over every watched partition
        if svc.set.version != version_seen:
            version_seen = svc.set.version
            touched.update(watched)
        touched.update(p for p in ((k[0], k[1]) for k in svc.dirty) if p in watched)
        expected = {p: False for p in touched if p in watched}
        for p in watched:
            if p not in expected and p in timers and timers[p][0] <= now:
                expected[p] = timers[p][1]
        got = watch.due(cast(Any, svc), now)
        assert len(got) == len(dict(got)) and dict(got) == expected, (got, expected, now)
        touched.clear()
        svc.dirty.clear()
        for p in sorted(expected):  # the owner looks at each and schedules it again
            deadline = now + deadlines[PARTS.index(p)]
            watch.schedule(p, now, [], deadline)
            timers[p] = (deadline, False) if deadline <= now + RECHECK_MS else (now + RECHECK_MS, True)
        assert watch.timer == timers
        wake = watch.next_in(now)
        if not timers:
            assert wake is None
        else:
            assert wake is not None and 1 <= wake <= max(1, min(t for t, _ in timers.values()) - now)
