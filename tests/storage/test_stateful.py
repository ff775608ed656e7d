"""Hypothesis state machine: PartitionStore against a pure-Python reference model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from zmqueue.dataplane.storage import Columns, NewMessage, PartitionStore, StorageConfig, select
from zmqueue.dataplane.storage.ring import AVAILABLE, IN_FLIGHT, MOVING
from zmqueue.errors import InvalidReceipt

RETENTION_MS = 10_000


@dataclass
class Msg:
    body: bytes
    group: int
    enqueue_ms: int
    visible_at: int
    receive_count: int = 0
    state: str = "available"  # available | in_flight | moving
    attributes: bytes = b""


class StoreMachine(RuleBasedStateMachine):
    fifo = False

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="zmq-stateful-")
        self.config = StorageConfig(
            ring_slots=4,
            arena_bytes=4096,
            segment_bytes_max=4096,
            segment_roll_ms=1000,  # files roll by age too (every few rules), and are compacted
            fsync="never",
            retention_ms=RETENTION_MS,
            fifo=self.fifo,
        )
        self.now = 1_000
        self.store = PartitionStore.open(self.dir, self.config, now_ms=self.now)
        self.model: dict[int, Msg] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- model helpers -------------------------------------------------------
    def receivable(self, m: Msg) -> bool:
        return m.state in ("available", "in_flight") and m.visible_at <= self.now

    def candidates(self) -> list[int]:
        if not self.fifo:
            return [s for s in sorted(self.model) if self.receivable(self.model[s])]
        blocked = {m.group for m in self.model.values() if m.state == "in_flight" and m.visible_at > self.now}
        stopped: set[int] = set()
        out = []
        for s in sorted(self.model):
            m = self.model[s]
            if m.group in blocked or m.group in stopped or m.state == "moving":
                continue
            if self.receivable(m):
                out.append(s)
            else:
                stopped.add(m.group)
        return out

    # -- rules ---------------------------------------------------------------
    @rule(
        sizes=st.lists(st.integers(0, 700), min_size=1, max_size=4),
        delay=st.sampled_from([0, 0, 0, 30]),
        group=st.integers(0, 2),
    )
    def append(self, sizes: list[int], delay: int, group: int) -> None:
        batch = []
        for size in sizes:
            self.counter += 1
            body = self.counter.to_bytes(4, "big") * (size // 4 + 1)
            batch.append(NewMessage(self.counter.to_bytes(16, "big"), body, b"", group, delay))
        seqs = self.store.append(batch, self.now)
        for seq, m in zip(seqs, batch, strict=True):
            assert seq not in self.model
            self.model[seq] = Msg(m.body, group, self.now, self.now + delay)

    @rule(
        sizes=st.lists(st.integers(0, 700), min_size=1, max_size=6),
        attr_sizes=st.one_of(st.none(), st.lists(st.integers(0, 40), min_size=6, max_size=6)),
        delays=st.one_of(
            st.sampled_from([0, 30]), st.lists(st.sampled_from([0, 0, 30]), min_size=6, max_size=6)
        ),
        groups=st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=6, max_size=6)),
        random_ids=st.booleans(),
    )
    def append_batch_of_columns(
        self,
        sizes: list[int],
        attr_sizes: list[int] | None,
        delays: int | list[int],
        groups: list[int] | None,
        random_ids: bool,
    ) -> None:
        n = len(sizes)
        first = self.counter + 1
        self.counter += n
        bodies = [(first + i).to_bytes(4, "big") * (size // 4 + 1) for i, size in enumerate(sizes)]
        attrs = None if attr_sizes is None else [b"a" * size for size in attr_sizes[:n]]
        delay = delays if isinstance(delays, int) else np.array(delays[:n], np.int64)
        ids = None if random_ids else b"".join((first + i).to_bytes(16, "big") for i in range(n))
        seqs = self.store.append_batch(
            bodies,
            self.now,
            message_ids=ids,
            attributes=attrs,
            group_hashes=None if groups is None else np.array(groups[:n], np.uint64),
            delay_ms=delay,
        )
        assert len(seqs) == n
        for i, seq in enumerate(seqs):
            assert seq not in self.model
            d = delays if isinstance(delays, int) else delays[i]
            group = 0 if groups is None else groups[i]
            attr = b"" if attrs is None else attrs[i]
            self.model[seq] = Msg(bodies[i], group, self.now, self.now + d, attributes=attr)

    @rule(
        # up to 4, and past select.SCALAR_PICK: a receive of 10 over the ring's last few slots
        k=st.one_of(st.integers(1, 4), st.integers(9, 12)),
        visibility=st.sampled_from([10, 50, 200]),
        max_rc=st.sampled_from([None, None, 2]),
        as_columns=st.booleans(),
        # bodies are up to 704 bytes: budgets that take none, one, a few
        max_bytes=st.sampled_from([None, None, 0, 700, 1500, 3000]),
        spent=st.sampled_from([0, 0, 600]),
    )
    def receive(self, k: int, visibility: int, max_rc: int | None, as_columns: bool,
                max_bytes: int | None, spent: int) -> None:
        expected = self.candidates()
        spent = 0 if max_bytes is None else spent
        if as_columns:  # the same messages, as columns when all are plain
            values, dead = self.store.receive_columns(k, self.now, visibility, max_receive_count=max_rc,
                                                      max_bytes=max_bytes, spent_bytes=spent)
            if isinstance(values, Columns):
                assert values.visible_at_ms == self.now + visibility
                assert all(not self.model[s].attributes and not self.model[s].group for s in values.seqs)
                values = values.delivered()
            got = values
        else:
            got, dead = self.store.receive(k, self.now, visibility, max_receive_count=max_rc,
                                           max_bytes=max_bytes, spent_bytes=spent)
        self.check_received(expected, k, max_rc, max_bytes, spent, [d.seq for d in got],
                            [d.seq for d in dead])
        for d in got:
            m = self.model[d.seq]
            assert max_rc is None or m.receive_count < max_rc
            assert d.body == m.body and d.receive_count == m.receive_count + 1
            assert d.attributes == m.attributes and d.group_hash == m.group
            m.receive_count += 1
            m.state, m.visible_at = "in_flight", self.now + visibility
        for d in dead:
            m = self.model[d.seq]
            assert max_rc is not None and m.receive_count >= max_rc
            m.state = "moving"

    def size(self, seq: int) -> int:
        return len(self.model[seq].body) + len(self.model[seq].attributes)

    def check_received(self, expected: list[int], k: int, max_rc: int | None, max_bytes: int | None,
                       spent: int, got: list[int], dead: list[int]) -> None:
        """A receive took the first candidates (``expected``) as dead letters
        and messages, except that the messages are the longest prefix of the
        deliverable candidates within ``max_bytes`` with ``spent`` (at least
        one when ``spent`` is 0): the others stay receivable, the dead letters
        picked with them go."""
        def is_dead(s: int) -> bool:
            return max_rc is not None and self.model[s].receive_count >= max_rc

        returned = sorted(got + dead)
        picked = expected[: expected.index(returned[-1]) + 1] if returned else []
        assert sorted(dead) == [s for s in picked if is_dead(s)], (dead, picked)
        deliverable = [s for s in expected if not is_dead(s)]
        assert sorted(got) == deliverable[: len(got)], (got, deliverable)
        used = spent + sum(map(self.size, got))
        if max_bytes is not None and got and not (spent == 0 and len(got) == 1):
            assert used <= max_bytes, (used, max_bytes)
        left = deliverable[len(got) :]
        cut = (max_bytes is not None and bool(left) and bool(got or spent)
               and used + self.size(left[0]) > max_bytes)
        if left and left[0] in picked:
            assert cut, ("a message picked was left out within the budget", got, picked)
        if len(returned) < min(k, len(expected)):
            assert cut or self.store.backlog.cursor is not None, (returned, expected)

    @rule(visibility=st.sampled_from([50, 200]))
    def consumers_holding_what_they_receive_still_reach_the_backlog(self, visibility: int) -> None:
        """Receive without deleting until a receive finds nothing: the ring
        fills with messages in flight and grows (up to 4x its 4 slots and 4
        KiB), so every visible message on disk comes out too; only past that
        cap may some stay, and stats then count them blocked on disk, not
        visible (the old code stopped at a ring full of messages in flight)."""
        for _ in range(1000):
            self.store.commit()  # (messages staged, not yet written, are paged in after the commit)
            got, dead = self.store.receive(12, self.now, visibility)
            assert not dead
            for d in got:
                m = self.model[d.seq]
                assert d.body == m.body and d.receive_count == m.receive_count + 1
                m.receive_count += 1
                m.state, m.visible_at = "in_flight", self.now + visibility
            if not got and (not self.candidates() or self.store.stats(self.now)["blocked_on_disk"]):
                break
        else:
            raise AssertionError("receives kept finding nothing while messages were receivable")
        left = self.candidates()
        if left:
            stats = self.store.stats(self.now)
            assert stats["blocked_on_disk"] == stats["backlog_on_disk"] > 0
            assert self.store.backlog.cursor is not None and min(left) >= self.store.backlog.cursor
            ring = self.store.ring
            assert not ring.room_for(0, starved=True) or ring.arena_bytes == ring.max_arena_bytes

    @rule()
    def mark_dead_lettered(self) -> None:
        moving = [s for s, m in self.model.items() if m.state == "moving"]
        self.store.mark_dead_lettered(moving, self.now)
        for s in moving:
            del self.model[s]

    def in_flight(self) -> list[int]:
        return sorted(s for s, m in self.model.items() if m.state == "in_flight")

    @precondition(lambda self: self.in_flight())
    @rule(data=st.data())
    def delete_with_a_valid_receipt(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.in_flight()))
        self.store.delete(seq, self.model[seq].receive_count, self.now)
        del self.model[seq]

    @rule(data=st.data())
    def delete_many_agrees_with_deleting_one_by_one(self, data: st.DataObject) -> None:
        """A batch of valid, stale, unknown and repeated receipts: each outcome is
        what deleting them one by one, in order, gives (delete_many's array path
        takes batches of 4 or more distinct seqs, the rest go one by one)."""
        flying = self.in_flight()
        picks = data.draw(st.lists(st.sampled_from(flying), max_size=6)) if flying else []
        receipts = [(s, self.model[s].receive_count + data.draw(st.sampled_from([0, 0, 1])))
                    for s in picks]
        receipts += [(s, data.draw(st.integers(0, 3)))
                     for s in data.draw(st.lists(st.integers(1, 80), min_size=1, max_size=5))]
        order = data.draw(st.permutations(receipts))
        outcomes = self.store.delete_many(order, self.now)
        assert len(outcomes) == len(order)
        for (seq, count), got in zip(order, outcomes, strict=True):
            m = self.model.get(seq)
            if m is not None and m.state == "in_flight" and m.receive_count == count:
                assert got is None, (seq, count, got)
                del self.model[seq]
            else:
                assert isinstance(got, InvalidReceipt), (seq, count, got)
                if m is None:  # deleted or never written: a retried delete succeeds upstream
                    assert got.details.get("gone") is True

    @rule(seq=st.integers(1, 60), delta=st.sampled_from([-1, 1]))
    def delete_with_a_stale_receipt_is_refused(self, seq: int, delta: int) -> None:
        m = self.model.get(seq)
        count = (m.receive_count if m else 1) + delta
        with pytest.raises(InvalidReceipt):
            self.store.delete(seq, count, self.now)

    @precondition(lambda self: self.in_flight())
    @rule(data=st.data(), visibility=st.sampled_from([0, 20, 300]))
    def change_visibility(self, data: st.DataObject, visibility: int) -> None:
        seq = data.draw(st.sampled_from(self.in_flight()))
        m = self.model[seq]
        deadline = self.store.change_visibility(seq, m.receive_count, visibility, self.now)
        assert deadline == (0 if visibility == 0 else self.now + visibility)
        m.visible_at = deadline

    @rule()
    def has_visible_agrees_with_the_model(self) -> None:
        """The long-poll probe (cached per ring change): True only if a receive would
        find something; False only if every candidate is still on disk only."""
        expected = self.candidates()
        if self.store.has_visible(self.now):
            assert expected
        else:
            ring = self.store.ring
            meta = ring.meta[: ring.n]
            in_ring = {int(s) for s in meta["seq"][(meta["state"] >= 1) & (meta["state"] <= 3)]}
            assert not in_ring & set(expected), (expected, in_ring)

    @rule()
    def next_wakeup_agrees_with_a_fresh_scan(self) -> None:
        """The long poll's timer (cached per ring change): the earliest future
        deadline of a waiting ring message, as a scan of the ring finds it."""
        ring = self.store.ring
        meta = ring.meta[: ring.n]
        waiting = (((meta["state"] == AVAILABLE) | (meta["state"] == IN_FLIGHT))
                   & (meta["visible_at_ms"] > self.now))
        expected = int(meta["visible_at_ms"][waiting].min()) if waiting.any() else None
        assert self.store.next_wakeup_ms(self.now) == expected
        assert self.store.next_wakeup_ms(self.now) == expected  # (the cached answer)

    @rule(step=st.integers(1, 120))
    def time_passes(self, step: int) -> None:
        self.now += step

    @rule()
    def retention_expires_old_messages(self) -> None:
        self.now += RETENTION_MS // 2
        cutoff = self.now - RETENTION_MS
        old = [s for s, m in self.model.items() if m.enqueue_ms <= cutoff]
        self.store.commit()  # expire() reaches on-disk backlog up to the last commit
        assert self.store.expire(self.now) == len(old)
        for s in old:
            del self.model[s]

    @rule()
    def purge(self) -> None:
        assert self.store.purge(self.now) == len(self.model)
        self.model.clear()

    @rule()
    def takeover(self) -> None:
        """A new writer's record of its epoch (RecordType.EPOCH): no message,
        the next seq, the log's last epoch; restarts keep it."""
        self.store.epoch += 1
        seq = self.store.mark_epoch(self.now)
        assert (self.store.last_seq, self.store.last_epoch) == (seq, self.store.epoch)

    @rule()
    def commit(self) -> None:
        self.store.commit()

    @rule()
    def restart(self) -> None:
        before = (self.store.last_seq, self.store.last_epoch)
        self.store.close()
        self.store = PartitionStore.open(self.dir, self.config, now_ms=self.now)
        assert (self.store.last_seq, self.store.last_epoch) == before
        assert self.store.recovery_report.corrupt_blocks == []
        for m in self.model.values():
            if m.state in ("in_flight", "moving"):
                m.state, m.visible_at = "available", 0

    @rule()
    def compact(self) -> None:
        self.store.compact()
        ring = self.store.ring
        if ring.live * 2 <= ring.base_slots and ring.live_bytes * 2 <= ring.base_arena_bytes:
            assert not ring.grown  # (housekeeping gives a grown ring's memory back)

    # -- invariants ----------------------------------------------------------
    @invariant()
    def counts_agree(self) -> None:
        stats = self.store.stats(self.now)
        assert stats["total"] == len(self.model)
        held = [m for m in self.model.values() if m.state == "in_flight" and m.visible_at > self.now]
        assert stats["in_flight"] == len(held)
        # (dead letters taken out and not yet moved are counted apart, not in in_flight)
        assert stats["dead_letters_waiting"] == sum(m.state == "moving" for m in self.model.values())
        assert stats["bytes"] >= 0
        parts = ("visible", "delayed", "in_flight", "blocked_on_disk", "dead_letters_waiting")
        assert sum(stats[k] for k in parts) == stats["total"]
        assert stats["blocked_on_disk"] in (0, stats["backlog_on_disk"])

    @invariant()
    def ring_stays_within_its_cap(self) -> None:
        ring = self.store.ring
        assert (ring.base_slots, ring.base_arena_bytes) == (4, 4096)
        assert 4 <= ring.slots <= ring.max_slots == 16 and 4096 <= ring.arena_bytes <= ring.max_arena_bytes
        assert ring.n <= ring.slots and ring.top <= ring.arena_bytes

    @invariant()
    def in_flight_messages_and_counts_agree(self) -> None:
        ring = self.store.ring
        meta = ring.meta[: ring.n]
        held = (meta["state"] == IN_FLIGHT) | (meta["state"] == MOVING)
        got = {int(s): int(c) for s, c in zip(meta["seq"][held], meta["receive_count"][held], strict=True)}
        want = {s: m.receive_count for s, m in self.model.items() if m.state in ("in_flight", "moving")}
        assert got == want

    @invariant()
    def fifo_pick_index_is_honest(self) -> None:
        """The in-flight index (when kept) names exactly the IN_FLIGHT slots,
        the groups kept cover every live slot's, and no slot before
        ``live_from`` is AVAILABLE or IN_FLIGHT."""
        ring = self.store.ring
        state = ring.state[: ring.n]
        if ring.inflight is not None:
            assert ring.inflight == set(np.flatnonzero(state == IN_FLIGHT).tolist())
        before = state[: ring.live_from]
        assert not ((before == AVAILABLE) | (before == IN_FLIGHT)).any()
        if ring.groups is not None:
            live = (state == AVAILABLE) | (state == IN_FLIGHT)
            assert ring.groups >= set(ring.group_hash[: ring.n][live].tolist())

    @invariant()
    def housekeeping_hints_are_honest(self) -> None:
        """No live slot before ``head``; no live slot enqueued before
        ``enqueued_floor`` (what lets expiry and compaction skip their scans)."""
        ring = self.store.ring
        state = ring.state[: ring.n]
        live = (state >= AVAILABLE) & (state <= MOVING)
        assert 0 <= ring.head <= ring.n and not live[: ring.head].any()
        if live.any():
            assert ring.enqueued_floor <= int(ring.meta["enqueue_ms"][: ring.n][live].min())


SETTINGS = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class FifoStoreMachine(StoreMachine):
    """FIFO queue; its picks scan one slot, then 2, 4, ... (chunks end inside
    the 4-slot ring, as they end inside the host's 65,536 slots)."""

    fifo = True

    def __init__(self) -> None:
        super().__init__()
        self.saved_chunk = select.FIFO_FIRST_CHUNK
        select.FIFO_FIRST_CHUNK = 1

    def teardown(self) -> None:
        select.FIFO_FIRST_CHUNK = self.saved_chunk
        super().teardown()


TestStandardQueueMatchesTheModel = StoreMachine.TestCase
TestStandardQueueMatchesTheModel.settings = SETTINGS
TestFifoQueueMatchesTheModel = FifoStoreMachine.TestCase
TestFifoQueueMatchesTheModel.settings = SETTINGS
