"""FIFO leader election state machine: unit tests of each rule."""

from __future__ import annotations

from zmqueue.controlplane.election import (
    BecomeLeader,
    Campaign,
    Commit,
    CommitAdvanced,
    ElectionState,
    Fence,
    Follow,
    LockAcquired,
    LockLost,
    PositionReported,
    RecordArrived,
    RefuseWrite,
    ReleaseLock,
    Role,
    SessionExpired,
    SessionRenewed,
    StepDown,
    Tick,
    can_write,
    has_majority_support,
    is_stale,
    may_campaign,
    quorum_position,
    step,
    voters_hold,
)
from zmqueue.controlplane.kvlayout import Position

REPLICAS = ("a", "b", "c")


def fresh(me="a", **kw):
    s = ElectionState(me=me, replicas=REPLICAS, lease_ms=600, **kw)
    for n in REPLICAS:
        s, _ = step(s, PositionReported(n, 0, 0))
    return s


def run(state, *events):
    actions = []
    for ev in events:
        state, out = step(state, ev)
        actions.extend(out)
    return state, actions


def test_stale_epochs_are_refused():
    assert is_stale(3, 4)
    assert not is_stale(4, 4)
    assert not is_stale(5, 4)


def test_positions_compare_by_epoch_first_then_sequence():
    assert Position(2, 1) > Position(1, 999)
    assert may_campaign(Position(2, 5), Position(2, 5))
    assert not may_campaign(Position(1, 9), Position(2, 0))


def test_quorum_position_is_what_a_majority_has_reached():
    pos = {"a": Position(1, 9), "b": Position(1, 5), "c": Position(1, 2)}
    assert quorum_position(pos, REPLICAS) == Position(1, 5)
    assert quorum_position({"a": Position(1, 9)}, REPLICAS) == Position(0, 0)


def test_majority_support_needs_reports_from_a_majority():
    assert has_majority_support("a", {"a": Position(1, 5), "b": Position(1, 5)}, REPLICAS)
    assert not has_majority_support("a", {"a": Position(1, 5)}, REPLICAS)
    assert not has_majority_support("a", {"a": Position(1, 1), "b": Position(1, 5),
                                          "c": Position(1, 5)}, REPLICAS)


def test_a_follower_campaigns_when_the_lock_is_free_and_it_is_up_to_date():
    _, actions = run(fresh(), Tick(10))
    assert Campaign() in actions


def test_acquiring_the_lock_makes_the_node_leader_at_the_lock_index():
    s, actions = run(fresh(), LockAcquired("a", 7, at_ms=100))
    assert s.role is Role.LEADER and s.epoch == 7 and s.leader == "a"
    assert actions == [Fence(7), BecomeLeader(7)]
    assert can_write(s, 699) and not can_write(s, 700)


def test_another_nodes_lock_makes_this_node_follow_it():
    s, actions = run(fresh(), LockAcquired("b", 3))
    assert s.role is Role.FOLLOWER and s.leader == "b"
    assert actions == [Fence(3), Follow("b", 3)]


def test_old_lock_notifications_are_ignored():
    s, _ = run(fresh(), LockAcquired("b", 5))
    s2, actions = run(s, LockAcquired("a", 4), LockLost(4))
    assert s2 == s and actions == []


def test_a_node_behind_the_committed_position_does_not_campaign():
    _, actions = run(fresh(), CommitAdvanced(2, 10), Tick(5))
    assert Campaign() not in actions


def test_a_node_that_wins_the_lock_while_behind_releases_it():
    s, actions = run(fresh(), CommitAdvanced(2, 10), LockAcquired("a", 3))
    assert s.role is Role.FOLLOWER and s.leader is None
    assert ReleaseLock("behind the committed position") in actions
    assert not any(isinstance(a, BecomeLeader) for a in actions)


def test_a_leader_steps_down_at_its_lease_deadline_unless_renewed():
    s, _ = run(fresh(), LockAcquired("a", 1, at_ms=0))
    renewed, actions = run(s, SessionRenewed(400, 1), Tick(900))
    assert renewed.role is Role.LEADER and actions == []
    down, actions = run(renewed, Tick(1000))
    assert down.role is Role.FOLLOWER
    assert StepDown(1, "lease expired") in actions and ReleaseLock("lease expired") in actions


def test_a_leader_steps_down_when_it_loses_its_session_or_lock():
    s, _ = run(fresh(), LockAcquired("a", 1))
    for ev in (SessionExpired(), LockLost(1)):
        down, actions = run(s, ev)
        assert down.role is Role.FOLLOWER
        assert any(isinstance(a, StepDown) for a in actions)


def test_a_record_from_an_older_epoch_is_refused():
    s, _ = run(fresh(), LockAcquired("b", 5))
    _, actions = run(s, RecordArrived("c", 4))
    assert actions == [RefuseWrite(4, 5)]


def test_a_record_from_a_newer_epoch_deposes_the_leader():
    s, _ = run(fresh(), LockAcquired("a", 5))
    s, actions = run(s, RecordArrived("b", 6))
    assert s.role is Role.FOLLOWER and s.epoch == 6 and s.leader == "b"
    assert actions == [StepDown(5, "saw a record of epoch 6"), Fence(6), Follow("b", 6)]


def test_the_leader_commits_what_a_majority_holds_in_its_own_epoch():
    s, _ = run(fresh(), LockAcquired("a", 2))
    s, actions = run(s, PositionReported("a", 2, 4), PositionReported("b", 2, 3))
    assert actions == [Commit(Position(2, 3))]
    assert s.committed == Position(2, 3)


def test_the_leader_never_commits_an_older_epoch_by_counting():
    s, _ = run(fresh(), LockAcquired("a", 2))
    _, actions = run(s, PositionReported("a", 1, 9), PositionReported("b", 1, 9))
    assert actions == []


def test_a_renewal_of_a_newer_session_does_not_revive_an_older_term():
    s, _ = run(fresh(), LockAcquired("a", 1, at_ms=0))
    s, _ = run(s, SessionRenewed(500, 2))
    assert not can_write(s, 700)


def test_a_replica_at_a_newer_epoch_neither_counts_toward_a_commit_nor_keeps_the_leader():
    s, _ = run(fresh(), LockAcquired("a", 1))
    s, actions = run(s, PositionReported("a", 1, 1), PositionReported("b", 2, 1))
    assert not any(isinstance(a, Commit) for a in actions)
    assert s.role is Role.FOLLOWER and s.epoch == 2


def test_a_lock_seen_only_after_its_lease_would_be_over_is_released_not_led():
    s, _ = run(fresh(), Tick(5000))
    s, actions = run(s, LockAcquired("a", 3, at_ms=1000))
    assert s.role is Role.FOLLOWER
    assert ReleaseLock("lease over before the lock was seen") in actions


def test_what_the_voters_hold() -> None:
    pos = {"a": Position(1, 9), "b": Position(1, 7), "c": Position(1, 2)}
    assert voters_hold(pos, "abc") == Position(1, 7)  # a majority of the three
    assert voters_hold(pos, "abc", joining="c") == Position(1, 7)  # a and b: both (sync)
    assert voters_hold(pos, "abc", joining="c", sync=False) == Position(1, 9)  # async: the most advanced
    assert voters_hold(pos, "abc", joining="abc") == Position(1, 9)  # nobody votes: the most advanced
