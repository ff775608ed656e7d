"""What a host answers for a stream it does not write (pure: ``nowriter.no_writer``
and ``writer_election.waiting_note``)."""

from __future__ import annotations

from zmqueue.controlplane.writer_election import Candidacy, waiting_note
from zmqueue.dataplane.nowriter import ConsulLost, no_writer
from zmqueue.errors import NotLeader, Unavailable


def test_a_host_that_lost_consul_past_the_grace_says_so_instead_of_naming_a_stale_writer() -> None:
    """(Hosts named each other as the writer and clients went back and forth
    for their whole request timeout; nothing mentioned Consul.)"""
    lost = ConsulLost(since=100.0, grace_s=60.0)
    err = no_writer("orders", 0, "k1h3", "k1h1", "tcp://k1h1:1", lost=lost, now=175.0)
    assert type(err) is Unavailable
    assert "'orders' partition 0 (k1h3): this host lost Consul 75 s ago" in err.message
    assert "writers stop after 60 s without it" in err.message and "restore Consul" in err.message
    assert err.details["stored"] is False and err.details["consul_lost_s"] == 75
    # within the grace the writers keep their streams: the hint still holds
    within = no_writer("orders", 0, "k1h3", "k1h1", "tcp://k1h1:1", lost=lost, now=130.0)
    assert type(within) is NotLeader and within.details["leader"] == "k1h1"
    assert "is written by k1h1; retry there" in within.message
    # Consul back: the plain hint
    assert type(no_writer("orders", 0, "k1h3", "k1h1", "tcp://k1h1:1", now=175.0)) is NotLeader


def test_a_stream_whose_election_waits_for_its_voters_says_what_it_waits_for() -> None:
    cand = Candidacy(replicas=("h1", "h2", "h3"), preferred=None)
    note = waiting_note(cand, passing={"h1"})
    assert "waits for a majority of its voting replicas (2 of 3)" in note
    assert "only 1 of 3 are up (down: h2, h3)" in note and "bring a down host back" in note
    err = no_writer("orders.fifo", 0, "fifo", None, None, waiting=note)
    assert type(err) is NotLeader and err.details["leader"] is None
    assert err.message.startswith("'orders.fifo' partition 0 (fifo) has no writer: its election waits")
    # all up (a failover's first moments): waiting for their reports
    assert "(all 3 are up): retry in a moment" in waiting_note(cand, passing={"h1", "h2", "h3"})
    # a known writer wins over a note left from before it was elected
    assert "is written by h2" in no_writer("orders.fifo", 0, "fifo", "h2", "tcp://h2:1", waiting=note).message
    # nothing known: as before
    assert "no host yet (election in progress)" in no_writer("orders.fifo", 0, "fifo", None, None).message


def test_a_joint_change_in_flight_counts_the_voters_of_both_sets() -> None:
    cand = Candidacy(replicas=("h1", "h2", "h3", "h4"), preferred=None, leaving=("h4",),
                     previous=("h2", "h3", "h4"))
    note = waiting_note(cand, passing={"h1", "h2"})
    assert "(2 of 3 and 2 of 3)" in note and "only 2 of 4 are up (down: h3, h4)" in note
    assert "a change of the replica set is being confirmed" in note


def test_a_stream_of_another_host_with_no_writer_names_no_other_replica() -> None:
    """(QA: with no writer for h3's stream, h1 answered "written by h2" and h2
    "written by h1": a replica writing its own stream takes sends, not
    requests for a stream it does not write, and a purge bounced between them
    for its whole timeout.)"""
    from types import SimpleNamespace

    from zmqueue.config import QueueConfig
    from zmqueue.dataplane.service import QueueService
    from zmqueue.dataplane.topology import Metadata, PartitionInfo

    def svc(writers: dict[str, str]) -> QueueService:
        meta = Metadata(configs={"q": QueueConfig(name="q")},
                        partitions={("q", 0): PartitionInfo(("h1", "h2", "h3"), writers)})
        fake = SimpleNamespace(node="h1", meta=meta, set=SimpleNamespace(failed={}), consul_lost=None,
                               election_waits={})
        fake.redirect_to = lambda *key: QueueService.redirect_to(fake, *key)  # type: ignore[arg-type]
        return fake  # type: ignore[return-value]

    mine = svc({"h2": "h2"})
    err = QueueService.not_writer(mine, "q", 0, "h3")
    assert err.details["leader"] is None and "no host yet" in err.message
    assert QueueService.not_writer(svc({"h2": "h2", "h3": "h2"}), "q", 0, "h3").details["leader"] == "h2"
    # this host's own stream (a send): any replica that writes its own takes it
    assert QueueService.not_writer(mine, "q", 0, "h1").details["leader"] == "h2"
