"""Picking messages to receive: vectorised scans over the ring's metadata.

Standard queues take the oldest receivable messages, scanning forward from a
hint (everything before it was not receivable, and cannot become so before
``hint_deadline``), so a receive costs O(messages skipped), not O(ring). A
receive of a few messages, or any receive with only a few slots left past the
hint (a caught-up consumer), reads the first slots from the hint one at a
time (usually the first one is receivable) before scanning arrays.

FIFO queues skip a group while any of its messages is IN_FLIGHT (deadline not
passed: the ring keeps an index of in-flight slots, so finding these groups
costs O(in flight), not O(ring)); otherwise a group's receivable messages are
taken in seq order up to its first one that is still delayed. The scan runs
forward from the first live slot in chunks until it has enough, so it too
costs O(slots passed).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from zmqueue.dataplane.storage.ring import AVAILABLE, IN_FLIGHT, MOVING, NEVER, IntArray, Ring

FIRST_CHUNK = 256
SCALAR_PICK = 8  # receives of up to this many messages scan the first slots one at a time
SCALAR_SCAN = 16  # ... this many slots, then the array scan goes on
SCALAR_TAIL = 8  # any receive scans one at a time when at most this many slots are left
FIFO_FIRST_CHUNK = 256  # a FIFO pick's first chunk of slots (then doubling)
FIFO_SCALAR_PICK = 8  # FIFO receives of up to this many read the first SCALAR_SCAN slots one at a time
_NO_GROUPS = np.zeros(0, np.uint64)


def split_dead(ring: Ring, idx: IntArray, max_rc: int | None) -> tuple[IntArray, IntArray]:
    """(to deliver, dead letters) among candidate slots ``idx``."""
    if max_rc is None or len(idx) == 0:
        return idx, idx[:0]
    dead = ring.meta["receive_count"][idx] >= max_rc
    return idx[~dead], idx[dead]


def pick_standard(ring: Ring, now: int, k: int) -> IntArray:
    """Slots of up to ``k`` receivable messages, oldest first; advances the hint."""
    if now >= ring.hint_deadline:
        ring.hint, ring.hint_deadline = 0, NEVER
    state, vis = ring.state, ring.visible_at
    start, chunk, got = ring.hint, FIRST_CHUNK, []
    if k <= SCALAR_PICK or ring.n - start <= SCALAR_TAIL:
        # (a caught-up consumer's receive of 10 usually has one or two new slots to read)
        start, first = _scan_scalar(ring, now, k, start)
        if len(first) == k or start >= ring.n:
            ring.hint = start
            return np.array(first, np.int64)
        if first:
            got.append(np.array(first, np.int64))
            k -= len(first)
    need, scanned_to = k, start
    while start < ring.n and need > 0:
        end = min(ring.n, start + chunk)
        v = vis[start:end]
        live = (state[start:end] - AVAILABLE) <= (IN_FLIGHT - AVAILABLE)  # u8: FREE wraps to 255
        ok = live & (v <= now)
        hits = np.flatnonzero(ok)[:need]
        scanned_to = int(hits[-1]) + 1 + start if len(hits) == need else end
        stop = scanned_to - start
        if np.count_nonzero(live[:stop]) > np.count_nonzero(ok[:stop]):
            ring.note_deadline(int(v[:stop][live[:stop] & ~ok[:stop]].min()))
        got.append(hits + start)
        need -= len(hits)
        start, chunk = end, chunk * 2
    ring.hint = scanned_to
    if len(got) == 1:
        return got[0]
    return np.concatenate(got) if got else np.zeros(0, np.int64)


def _scan_scalar(ring: Ring, now: int, k: int, start: int) -> tuple[int, list[int]]:
    """The first :data:`SCALAR_SCAN` slots from ``start``, one at a time (a
    receive of one message usually finds it at the hint: a few scalar reads
    instead of a dozen array operations). Returns (where the scan stopped,
    receivable slots found); notes the deadlines of the live slots it passed."""
    state, vis = ring.state, ring.visible_at
    got: list[int] = []
    i, stop = start, min(ring.n, start + SCALAR_SCAN)
    while i < stop:
        if AVAILABLE <= state[i] <= IN_FLIGHT:
            v = int(vis[i])
            if v <= now:
                got.append(i)
                if len(got) == k:
                    return i + 1, got
            else:
                ring.note_deadline(v)
        i += 1
    return i, got


def in_flight_slots(ring: Ring) -> IntArray:
    """The ring's IN_FLIGHT slots, from :attr:`Ring.inflight` (rebuilt from
    the states, once, when a compaction or a replay dropped it)."""
    fl = ring.inflight
    if fl is None:
        idx = np.flatnonzero(ring.state[: ring.n] == IN_FLIGHT)
        ring.inflight = set(idx.tolist())
        return idx
    return np.fromiter(fl, np.int64, len(fl))


def ring_groups(ring: Ring) -> set[int]:
    """:attr:`Ring.groups` (a superset of the live slots' groups), rebuilt
    from the live slots when a compaction or a replay dropped it."""
    if ring.groups is None:
        state = ring.state[: ring.n]
        live = (state - AVAILABLE) <= (IN_FLIGHT - AVAILABLE)
        ring.groups = set(np.unique(ring.group_hash[: ring.n][live]).tolist())
    return ring.groups


def _all_shut(seen: set[int], shut: npt.NDArray[np.uint64]) -> bool:
    """Every group of the ring is in ``shut``."""
    return len(shut) >= len(seen) and seen.issubset(shut.tolist())


def pick_fifo(ring: Ring, now: int, k: int) -> IntArray:
    """Slots of up to ``k`` messages respecting per-group order and blocking.

    A group is shut while one of its messages is IN_FLIGHT before its deadline
    (anywhere in the ring: the in-flight index, not a scan), or past its
    first delayed message. The scan goes forward from ``ring.live_from`` in
    chunks (doubling) until ``k`` are found, so a receive costs O(slots
    passed), not O(ring); it moves ``live_from`` past the dead slots at the
    front. It stops as soon as every group in the ring (:attr:`Ring.groups`)
    is shut: a queue of a few groups, all in flight, is answered without a
    scan.
    """
    state, vis, groups = ring.state, ring.visible_at, ring.group_hash
    fl = in_flight_slots(ring)
    shut = np.unique(groups[fl][vis[fl] > now]) if len(fl) else _NO_GROUPS
    seen = ring_groups(ring)
    if len(shut) and _all_shut(seen, shut):
        return np.zeros(0, np.int64)
    start, n, chunk, need, front = ring.live_from, ring.n, FIFO_FIRST_CHUNK, k, True
    got: list[IntArray] = []
    if k <= FIFO_SCALAR_PICK:
        start, taken, shut, front = _fifo_scalar(ring, now, k, shut)
        if len(taken) == k or start >= n or (len(shut) and _all_shut(seen, shut)):
            return np.array(taken, np.int64)
        if taken:
            got.append(np.array(taken, np.int64))
            need -= len(taken)
    while start < n and need > 0:
        end = min(n, start + chunk)
        s, v, g = state[start:end], vis[start:end], groups[start:end]
        live = (s - AVAILABLE) <= (IN_FLIGHT - AVAILABLE)  # u8: FREE wraps to 255
        if front:
            first = int(live.argmax())
            if not live[first]:  # nothing live in this chunk: the front moves past it
                ring.live_from = start = end
                chunk *= 2
                continue
            ring.live_from, front = start + first, False
        cand = live & ~np.isin(g, shut) if len(shut) else live
        ok = cand & (v <= now)
        stop_idx = np.flatnonzero(cand & ~ok)  # delayed: its group stops there
        ok_idx = np.flatnonzero(ok)
        if len(stop_idx):
            stopped, first_of = np.unique(g[stop_idx], return_index=True)
            if len(ok_idx):
                first_stop = stop_idx[first_of]
                pos = np.minimum(np.searchsorted(stopped, g[ok_idx]), len(stopped) - 1)
                has_stop = stopped[pos] == g[ok_idx]
                ok_idx = ok_idx[~has_stop | (ok_idx < first_stop[pos])]
            shut = np.union1d(shut, stopped)
        take = ok_idx[:need]
        got.append(take + start)
        need -= len(take)
        start, chunk = end, chunk * 2
        if len(stop_idx) and _all_shut(seen, shut):
            break
    if len(got) == 1:
        return got[0].astype(np.int64, copy=False)
    return np.concatenate(got).astype(np.int64, copy=False) if got else np.zeros(0, np.int64)


def _fifo_scalar(ring: Ring, now: int, k: int, shut: npt.NDArray[np.uint64]
                 ) -> tuple[int, list[int], npt.NDArray[np.uint64], bool]:
    """:func:`pick_fifo` over the first :data:`SCALAR_SCAN` slots from
    ``live_from``, one at a time (a caught-up consumer's receive usually
    takes the first live slot: a few scalar reads instead of a dozen array
    operations). Returns (where it stopped, slots taken, the shut groups
    with those it found delayed, whether no live slot was passed yet)."""
    state, vis, groups = ring.state, ring.visible_at, ring.group_hash
    closed = set(shut.tolist())
    stopped: list[int] = []
    got: list[int] = []
    front = True
    i = ring.live_from
    stop = min(ring.n, i + SCALAR_SCAN)
    while i < stop:
        if AVAILABLE <= state[i] <= IN_FLIGHT:
            if front:
                ring.live_from, front = i, False
            g = int(groups[i])
            if g not in closed:
                if int(vis[i]) <= now:
                    got.append(i)
                    if len(got) == k:
                        i += 1
                        break
                else:  # delayed: the group stops here
                    closed.add(g)
                    stopped.append(g)
        i += 1
    if front:
        ring.live_from = i
    if stopped:
        shut = np.union1d(shut, np.array(stopped, np.uint64))
    return i, got, shut, front


def next_wakeup(ring: Ring, now: int) -> int | None:
    """Earliest future ``visible_at_ms`` of a waiting message, or None.

    Answered from the last scan while the ring is unchanged (its
    ``version``): the earliest deadline after ``since`` is also the earliest
    after any later ``now`` before it, and None stays None. A parked long
    poll asks once per host pass; the scan is O(ring) (≈ 0.3 ms at 65,536
    slots), so a host busy with other queues would pay it on every pass for
    a stream whose messages are all in flight.
    """
    version, since, wake = ring.wake
    if version == ring.version and since <= now and (wake is None or wake > now):
        return wake
    n = ring.n
    s, v = ring.meta["state"][:n], ring.meta["visible_at_ms"][:n]
    waiting = ((s == AVAILABLE) | (s == IN_FLIGHT)) & (v > now)
    wake = int(v[waiting].min()) if waiting.any() else None
    ring.wake = (ring.version, now, wake)
    return wake


def ring_counts(ring: Ring, now: int) -> dict[str, int]:
    n = ring.n
    s, v = ring.meta["state"][:n], ring.meta["visible_at_ms"][:n]
    live = (s == AVAILABLE) | (s == IN_FLIGHT)
    visible = int(np.count_nonzero(live & (v <= now)))
    delayed = int(np.count_nonzero((s == AVAILABLE) & (v > now)))
    moving = s == MOVING
    dead = int(np.count_nonzero(moving))
    oldest = 0
    if ring.live:
        enq = ring.meta["enqueue_ms"][:n][live | moving]
        oldest = max(0, now - int(enq.min())) if len(enq) else 0
    return {
        "oldest_age_ms": oldest,
        "visible": visible,
        "delayed": delayed,
        "in_flight": ring.live - visible - delayed - dead,
        "dead_letters_waiting": dead,
    }


def probe(ring: Ring, now: int, fifo: bool) -> bool:
    """Whether a receive at ``now`` would pick something.

    Standard queues: the scan hint may advance up to, not past, the first
    receivable slot (past it would hide that slot from the next receive), so
    repeated probes do not rescan delayed or in-flight slots.
    """
    if fifo:
        return len(pick_fifo(ring, now, 1)) > 0
    hits = pick_standard(ring, now, 1)
    if len(hits):
        ring.hint = int(hits[0])
        return True
    return False


def has_visible(ring: Ring, now: int, fifo: bool) -> bool:
    """:func:`probe`, answered from the last probe while the ring is unchanged.

    Receivability only grows with time while no slot changes: a True answer
    holds for any later ``now``, a False one until the earliest deadline of a
    waiting slot (standard: ``hint_deadline``, everything past the hint was
    scanned; FIFO: :func:`next_wakeup`, computed once per change).
    """
    version, since, until, answer = ring.probe
    if version == ring.version and since <= now and (answer or now < until):
        return answer
    answer = probe(ring, now, fifo)
    if answer:
        until = NEVER
    elif fifo:
        wake = next_wakeup(ring, now)
        until = NEVER if wake is None else wake
    else:
        until = ring.hint_deadline
    ring.probe = (ring.version, now, until, answer)
    return answer


def _live(ring: Ring) -> np.ndarray[tuple[int], np.dtype[np.bool_]]:
    state = ring.state[: ring.n]
    live: np.ndarray[tuple[int], np.dtype[np.bool_]] = (state >= AVAILABLE) & (state <= MOVING)
    return live


def remove_enqueued_by(ring: Ring, cutoff: int) -> int:
    """Remove live messages enqueued at or before ``cutoff`` (retention); return how many.

    No array work while every live message is known to be newer (the
    ring's ``enqueued_floor``, which a scan here sets exactly): the usual
    once-a-second answer for a stream, idle or with a full ring.
    """
    if not ring.live or ring.enqueued_floor > cutoff:
        return 0
    live = _live(ring)
    enq = ring.meta["enqueue_ms"][: ring.n]
    old_mask = live & (enq <= cutoff)
    old = np.flatnonzero(old_mask)
    if len(old):
        ring.remove(old)
        live &= ~old_mask
    ring.enqueued_floor = int(enq[live].min()) if ring.live else NEVER
    return len(old)


def lowest_live_seq(ring: Ring) -> int | None:
    """Seq of the oldest live message in the ring, None if there is none:
    the first live slot, looked for from the ring's ``head`` on (which it
    then moves there), in doubling chunks."""
    if not ring.live:
        return None
    state, n = ring.state, ring.n
    i, chunk = ring.head, 256
    while i < n:
        part = state[i : min(n, i + chunk)]
        hits = np.flatnonzero((part >= AVAILABLE) & (part <= MOVING))
        if len(hits):
            ring.head = i + int(hits[0])
            return int(ring.meta["seq"][ring.head])
        i += len(part)
        chunk *= 2
    ring.head = n
    return None
