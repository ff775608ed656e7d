"""After a writer's lock is released, a candidate counts only positions
published since (``writer_election.heard_enough``): with them and its own, enough
voters to meet every ack quorum (2 of 3), none of those that are down ahead
of it. And the
``seen`` a position is published with round-trips through Consul KV's value."""

from __future__ import annotations

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.writer_election import Candidacy, heard_enough, may_campaign

P = kv.Position
FIFO = Candidacy(("a", "b", "c"), None)


def test_a_lone_survivor_does_not_campaign_on_positions_published_before_the_release() -> None:
    stale = {"a": P(1, 0), "b": P(1, 0)}  # a and b died before publishing record 1
    assert may_campaign("c", FIFO, {"c"}, P(1, 0), stale)  # what the rule allowed before
    assert not may_campaign("c", FIFO, {"c"}, P(1, 0), stale, confirmed=set())
    assert not may_campaign("c", FIFO, {"c"}, P(1, 0), stale, confirmed={"d"})  # not a voter


def test_one_confirmed_peer_makes_a_majority_of_three() -> None:
    assert may_campaign("c", FIFO, {"b", "c"}, P(1, 4), {"a": P(1, 0), "b": P(1, 4)}, confirmed={"b"})
    assert heard_enough("c", FIFO, {"b", "c"}, P(1, 4), {"b": P(1, 4)}, {"b"})


def test_what_must_be_heard_meets_every_ack_quorum() -> None:
    """An ack needs a majority of the voters: of two, both, so the survivor
    holds every acknowledged record and may lead alone; of five, three, so
    three must be heard."""
    two = Candidacy(("a", "b"), None)
    assert heard_enough("a", two, {"a"}, P(1, 4), {"b": P(1, 3)}, set())
    five = Candidacy(("a", "b", "c", "d", "e"), None)
    assert not heard_enough("a", five, {"a", "b"}, P(1, 4), {}, {"b"})
    assert heard_enough("a", five, {"a", "b", "c"}, P(1, 4), {}, {"b", "c"})
    four = Candidacy(("a", "b", "c", "d"), None)  # an ack needs 3 of 4: any 2 meet each such 3
    assert heard_enough("a", four, {"a", "b"}, P(1, 4), {}, {"b"})


def test_a_confirmed_peer_that_is_down_and_ahead_holds_the_candidate_back() -> None:
    """It published after the release, then died: it may hold an acknowledged
    record nobody alive has. A live peer ahead is fetched from instead."""
    ahead = {"a": P(1, 0), "b": P(1, 5)}
    assert not heard_enough("c", FIFO, {"c"}, P(1, 4), ahead, {"b"})
    assert heard_enough("c", FIFO, {"b", "c"}, P(1, 4), ahead, {"b"})


def test_joining_replicas_are_no_voters_and_an_asynchronous_stream_is_exempt() -> None:
    joining = Candidacy(("a", "d"), None, ("d",))  # R=1 grew: a holds the records, d joined empty
    assert not may_campaign("d", joining, {"d"}, P(0, 0), {"a": P(0, 0)}, confirmed={"d"})
    assert may_campaign("a", joining, {"a", "d"}, P(1, 9), {"d": P(0, 0)}, confirmed=set())
    async_fifo = Candidacy(("a", "b", "c"), None, sync=False)
    assert may_campaign("c", async_fifo, {"c"}, P(1, 0), {"a": P(1, 0), "b": P(1, 0)}, confirmed=set())


def test_a_standard_stream_s_origin_takes_its_stream_back_past_a_live_peer_ahead() -> None:
    std = Candidacy(("a", "b", "c"), "a")
    assert may_campaign("a", std, {"a", "b", "c"}, P(1, 3), {"b": P(2, 6), "c": P(1, 3)}, confirmed={"b"})
    assert not may_campaign("a", std, {"a", "c"}, P(1, 3), {"b": P(2, 6), "c": P(1, 3)}, confirmed={"b"})


def test_seen_is_published_with_the_position_and_read_back() -> None:
    key = kv.stream_position_key(kv.PartitionId("q", 0), "fifo", "b")
    items = [{"Key": key, "Value": kv.encode_position(P(3, 7), seen=41)},
             {"Key": kv.stream_position_key(kv.PartitionId("q", 0), "fifo", "c"),
              "Value": kv.encode_position(P(3, 6))},
             {"Key": kv.stream_position_key(kv.PartitionId("q", 0), "fifo", "d"), "Value": b"{bad"}]
    assert kv.decode_stream_positions(items) == {("q", 0, "fifo"): {"b": P(3, 7), "c": P(3, 6)}}
    assert kv.decode_stream_seen(items) == {("q", 0, "fifo"): {"b": 41, "c": 0}}
    assert b"seen" not in kv.encode_position(P(3, 6))  # what earlier versions wrote and read


def test_with_sync_quorum_all_a_lone_survivor_takes_over_and_holds_every_acknowledged_record() -> None:
    """Every voter held each acknowledged record: one heard (itself) is enough,
    and what the voters hold is what all of them reached, so a survivor of
    two killed voters may lead even where their stale positions are ahead
    of it (records they held that were never acknowledged)."""
    every = Candidacy(("a", "b", "c"), None, sync_quorum="all")
    stale = {"a": P(1, 7), "b": P(1, 9)}  # a and b held 7 and 9; c has 5: only 5 was acknowledged
    assert heard_enough("c", every, {"c"}, P(1, 5), stale, set())
    assert may_campaign("c", every, {"c"}, P(1, 5), stale, confirmed=set())
    assert not may_campaign("c", FIFO, {"c"}, P(1, 5), stale, confirmed=set())  # (majority: waits)
    # a live voter further along takes it instead; a joining replica never does
    assert not may_campaign("c", every, {"b", "c"}, P(1, 5), stale, confirmed={"b"})
    assert may_campaign("b", every, {"b", "c"}, P(1, 9), {"a": P(1, 7), "c": P(1, 5)}, confirmed=set())
    joining = Candidacy(("a", "b", "c", "d"), None, ("d",), sync_quorum="all")
    assert not may_campaign("d", joining, {"d"}, P(0, 0), stale, confirmed={"d"})
    # a voter back without its disk holds less than a writer said every voter held
    assert may_campaign("a", every, {"a"}, P(0, 0), {"b": P(1, 9), "c": P(1, 5)}, confirmed=set())
    assert not may_campaign("a", every, {"a"}, P(0, 0), {"b": P(1, 9), "c": P(1, 5)}, set(), acked=5)
    assert may_campaign("c", every, {"c"}, P(1, 5), stale, set(), acked=5)
    # an asynchronous stream's records were the writer's alone: the setting changes nothing
    async_every = Candidacy(("a", "b", "c"), None, sync=False, sync_quorum="all")
    assert async_every.quorum == "majority"
