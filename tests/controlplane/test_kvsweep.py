"""What the external manager sweeps (``kvsweep``): the lock and position
trees of queues a DELETE_QUEUE deleted, never those of a queue that exists
in any form; and a new partition's assignment is written only while its
queue's config is as planned (``managers.txn_ops``). Pure logic, no Consul."""

from __future__ import annotations

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.controlplane.external_manager import plan_external
from zmqueue.controlplane.fleetview import AssignmentWrite
from zmqueue.controlplane.kvsweep import leftovers, listed_queues, sweep_ops
from zmqueue.controlplane.managers import txn_ops
from zmqueue.controlplane.queue_directory import Snapshot


def test_a_folder_listing_names_the_queues_under_a_prefix() -> None:
    keys = ["zmqueue/leaders/a/", "zmqueue/leaders/b.fifo/", "zmqueue/leaders/stray", "other/c/",
            "zmqueue/leaders/"]
    assert listed_queues(keys, "zmqueue/leaders/") == {"a", "b.fifo"}
    assert listed_queues(None, "zmqueue/leaders/") == set()


def _state() -> kv.ClusterState:
    deleted = {"gone": 40, "vanished": 12, "again": 30, "bad": 5}
    return kv.ClusterState(
        configs={"live": QueueConfig(name="live"), "again": QueueConfig(name="again")},
        assignments={kv.PartitionId("vanished", 0): kv.PartitionAssignment("c1", ("n1",), 1),
                     kv.PartitionId("live", 0): kv.PartitionAssignment("c1", ("n1",), 1)},
        deleted=deleted, modify_index={kv.deleted_key(q): 100 + i for i, q in enumerate(deleted)})


def test_only_queues_deleted_and_absent_in_every_form_are_swept() -> None:
    problems = [kv.Malformed("zmqueue/queues/bad/config", "not JSON")]
    listed = {"gone", "live", "vanished", "again", "bad", "never"}
    # live: exists; vanished: its config deleted by hand, its partitions remain (still served);
    # again: deleted and created again; bad: a config that does not decode; never: no tombstone
    assert leftovers(_state(), problems, listed) == ["gone"]
    assert leftovers(_state(), [], {"live"}) == []


def test_a_sweep_checks_the_role_the_missing_config_and_the_tombstone_before_it_deletes() -> None:
    ops = sweep_ops("gone", 77, "zmqueue/managers/external", "sid")
    assert [o["KV"]["Verb"] for o in ops[:3]] == ["check-session", "check-not-exists", "check-index"]
    assert ops[1]["KV"]["Key"] == "zmqueue/queues/gone/config"
    assert ops[2]["KV"] == {"Verb": "check-index", "Key": "zmqueue/deleted/gone", "Index": 77}
    assert {o["KV"]["Key"] for o in ops[3:]} == {"zmqueue/leaders/gone/", "zmqueue-positions/gone/",
                                                 "zmqueue/positions/gone/"}
    assert all(o["KV"]["Verb"] == "delete-tree" for o in ops[3:])


def test_a_new_partition_is_written_only_while_its_queues_config_is_as_planned() -> None:
    state = kv.ClusterState(configs={"q": QueueConfig(name="q", replication_factor=1)},
                            modify_index={"zmqueue/queues/q/config": 41})
    snap = Snapshot(1, state, [], [HostInfo("n1", "c1", "1", "tcp://127.0.0.1:1", "passing")])
    writes, _ = plan_external(snap, {"n1": True})
    (w,) = writes
    assert (w.key, w.index, w.config_key, w.config_index) == ("zmqueue/queues/q/partitions/0", 0,
                                                              "zmqueue/queues/q/config", 41)
    ops = txn_ops(w, "zmqueue/managers/external", "sid")
    assert [o["KV"]["Verb"] for o in ops] == ["check-session", "check-index", "cas"]
    assert ops[1]["KV"] == {"Verb": "check-index", "Key": "zmqueue/queues/q/config", "Index": 41}
    move = AssignmentWrite(w.key, w.assignment, 9, "moved")  # (an existing key's CAS needs no more)
    assert [o["KV"]["Verb"] for o in txn_ops(move, "zmqueue/managers/external", "sid")] == [
        "check-session", "cas"]
