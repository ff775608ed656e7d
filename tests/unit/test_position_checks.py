"""A writer counts a replica's position report toward a synchronous ack only
when it can be true: from a replica of the partition, with well-formed
fields, no further than the writer's own log in its epoch, and, with CURVE,
sent under the reporting host's own name (the ZAP User-Id of its key).

Found by QA in the forty-sixth session: with both replicas of an R=3 sync
queue frozen, one forged ``POSITION {"node": "h2", "e": <epoch>, "seq": 2**62}``
sent with h3's host key made the writer acknowledge a send no replica held.
``tests/security/test_forged_positions.py`` repeats that on CURVE hosts.

Real stores and the real replication code; reports are handed to the writer
by the test (no sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from tests.unit.test_restart_epoch import replicator
from zmqueue.config import QueueConfig
from zmqueue.dataplane.replication import Replicator, stream_id
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role, Stream
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo
from zmqueue.errors import AccessDenied, InvalidParameter

NOW = 1_000_000
KEY = ("q", 0, "h1")
SID = stream_id(KEY)
EPOCH = 4
CFG = QueueConfig(name="q", replication_factor=3, sync_replication=True)
META = Metadata({"q": CFG}, {("q", 0): PartitionInfo(("h1", "h2", "h3"), {})})


class Writer:
    """h1 writes q/0/h1 at term EPOCH and holds three records no replica has reported."""

    def __init__(self, base: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.set = StreamSet("h1", base, StorageConfig(fsync="never"))
        self.set.reconcile(META, NOW)
        self.st: Stream = self.set.streams[KEY]
        self.st.store.append_batch([b"a", b"b", b"c"], NOW, EPOCH)
        self.st.store.commit()
        self.st.role, self.st.epoch, self.st.lease_until = Role.WRITER, EPOCH, float("inf")
        self.rep: Replicator = replicator(ctx, self.set)

    def secure(self) -> None:
        """As a host started with --curve-secret (its forwarder holds its keys)."""
        self.rep.forwarder.curve = object()

    def report(self, node: Any = "h2", e: Any = EPOCH, seq: Any = 3, user: str | None = None) -> Any:
        return self.rep.note_position({"s": SID, "node": node, "e": e, "seq": seq, "ack": False}, user)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    w = Writer(tmp_path, ctx)
    try:
        yield w
    finally:
        w.rep.close()
        w.set.close()
        ctx.destroy(linger=0)


def test_a_position_past_the_writers_own_log_is_ignored_not_counted(writer: Writer) -> None:
    assert writer.st.replicated_seq() == 0
    writer.report(seq=2**62)  # the forged report of the QA repro (no CURVE: any node name passes)
    assert writer.st.replicated_seq() == 0, "a report past the writer's log acknowledged its records"
    assert "h2" not in writer.st.follower_pos  # ignored, not clamped to the writer's last seq
    assert writer.rep.counters["positions_ahead_ignored"] == 1
    # the same in the periodic batch
    reply, _ = writer.rep.h_positions({"node": "h3", "b": [[SID, EPOCH, 4]]})
    assert reply["b"] == [[EPOCH, EPOCH, 3]] and writer.st.replicated_seq() == 0
    assert writer.rep.counters["positions_ahead_ignored"] == 2
    writer.report(seq=3)  # a true report still counts
    assert writer.st.replicated_seq() == 3


def test_with_curve_a_host_reports_under_its_own_name_only(writer: Writer) -> None:
    writer.secure()
    with pytest.raises(AccessDenied, match="registered as 'h3', not as 'h2'"):
        writer.report(node="h2", user="h3")
    with pytest.raises(AccessDenied):
        writer.report(node="h2", user=None)  # (no identity at all on a secured host)
    with pytest.raises(AccessDenied):
        writer.rep.h_positions({"node": "h2", "b": [[SID, EPOCH, 3]]}, "h3")
    with pytest.raises(AccessDenied):  # a recovery probe under another host's name moves no term
        writer.rep.h_position({"s": SID, "node": "h2", "e": -1, "seq": -1, "term": 99}, "h3")
    assert writer.st.replicated_seq() == 0 and writer.st.follower_pos == {}
    assert writer.rep.counters["positions_wrong_identity"] == 4
    writer.report(node="h2", user="h2")
    assert writer.st.replicated_seq() == 3


def test_without_curve_the_name_is_not_checked(writer: Writer) -> None:
    writer.report(node="h2", user=None)
    assert writer.st.replicated_seq() == 3


@pytest.mark.parametrize(("fields", "field"), [
    ({"node": 7}, "node"), ({"node": ""}, "node"), ({"node": None}, "node"),
    ({"e": "4"}, "e"), ({"e": True}, "e"), ({"e": -2}, "e"), ({"e": 2**64}, "e"),
    ({"seq": None}, "seq"), ({"seq": 3.0}, "seq"), ({"seq": -5}, "seq"), ({"seq": 2**63}, "seq"),
])
def test_a_malformed_report_is_an_invalid_parameter(writer: Writer, fields: dict[str, Any],
                                                    field: str) -> None:
    with pytest.raises(InvalidParameter) as one_way:
        writer.report(**fields)
    assert one_way.value.details["field"] == field
    body = {"s": SID, "node": "h2", "e": EPOCH, "seq": 3, **fields}
    with pytest.raises(InvalidParameter):
        writer.rep.h_position(body)
    item = [SID, body["e"], body["seq"]]
    with pytest.raises(InvalidParameter):  # a POSITIONS batch with one such item is refused whole
        writer.rep.h_positions({"node": body["node"], "b": [[SID, EPOCH, 3], item]})
    assert writer.st.follower_pos == {}


def test_a_probes_term_must_be_an_epoch(writer: Writer) -> None:
    for term in ("9", -1, 2**64, 1.5):
        with pytest.raises(InvalidParameter, match="term"):
            writer.rep.h_position({"s": SID, "node": "h2", "e": -1, "seq": -1, "term": term})


def test_a_host_that_is_no_replica_of_the_partition_is_refused_and_not_counted(writer: Writer) -> None:
    with pytest.raises(InvalidParameter, match="'h9' is not a replica of 'q' partition 0") as exc:
        writer.report(node="h9")
    assert exc.value.details["field"] == "node"
    with pytest.raises(InvalidParameter, match="not a replica"):
        writer.rep.h_position({"s": SID, "node": "h9", "e": EPOCH, "seq": 3})
    reply, noted = writer.rep.h_positions({"node": "h9", "b": [[SID, EPOCH, 3], ["q/5/x", 1, 1]]})
    assert "'h9' is not a replica" in reply["b"][0]["refused"] and reply["b"][1] is None
    assert noted == [] and writer.st.follower_pos == {} and writer.st.replicated_seq() == 0
    assert writer.rep.counters["positions_not_replica"] == 3
