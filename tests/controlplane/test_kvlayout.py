"""KV layout: key builders, codecs that never raise, and whole-tree parsing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.kvlayout import (
    LeaderRecord,
    Malformed,
    ManagerRecord,
    PartitionAssignment,
    PartitionId,
    Position,
)

PID = PartitionId("orders", 3)

DECODERS = [kv.decode_queue_config, kv.decode_assignment, kv.decode_leader,
            kv.decode_position, kv.decode_manager, kv.decode_drain]


def item(key, value, index=7, session=None, lock_index=None):
    d = {"Key": key, "Value": value, "ModifyIndex": index}
    if session:
        d["Session"] = session
    if lock_index is not None:
        d["LockIndex"] = lock_index
    return d


def test_every_key_lives_under_the_zmqueue_prefix():
    keys = [kv.queue_config_key("orders"), kv.partition_key(PID), kv.leader_key(PID),
            kv.position_key(PID, "n1"), kv.external_manager_key(),
            kv.cluster_manager_key("c1"), kv.drain_key("n1")]
    assert all(k.startswith("zmqueue/") for k in keys)
    assert kv.partition_key(PID) == "zmqueue/queues/orders/partitions/3"
    assert kv.leader_key(PID) == "zmqueue/leaders/orders/3"
    assert kv.position_key(PID, "n1") == "zmqueue/positions/orders/3/n1"
    assert kv.drain_key("n1") == "zmqueue/hosts/n1/drain"


def test_stream_positions_live_beside_the_watched_tree():
    # a blocking query on zmqueue/ must not return for every position write
    key = kv.stream_position_key(PID, "fifo", "n1")
    assert key == "zmqueue-positions/orders/3/fifo/n1"
    assert not key.startswith(kv.PREFIX)


def test_each_value_round_trips_through_its_codec():
    cfg = QueueConfig("orders", partitions=4, replication_factor=3)
    assert kv.decode_queue_config("k", kv.encode_queue_config(cfg)) == cfg
    a = PartitionAssignment("c1", ("n1", "n2"), 5)
    assert kv.decode_assignment("k", kv.encode_assignment(a)) == a
    assert "joining" not in json.loads(kv.encode_assignment(a))
    j = PartitionAssignment("c1", ("n1", "n2", "n3"), 6, {}, ("n3",))
    assert kv.decode_assignment("k", kv.encode_assignment(j)) == j and j.voters == ("n1", "n2")
    ld = LeaderRecord("n1", "tcp://127.0.0.1:5555", 9)
    assert kv.decode_leader("k", kv.encode_leader(ld)) == ld
    assert kv.decode_position("k", kv.encode_position(Position(2, 40))) == Position(2, 40)
    m = ManagerRecord("n1", 1700000000000)
    assert kv.decode_manager("k", kv.encode_manager(m)) == m
    assert kv.decode_drain("k", kv.encode_drain(True)) is True


def test_unknown_fields_are_kept_and_written_back():
    raw = b'{"cluster":"c1","replicas":["n1"],"version":1,"note":"hand-edited"}'
    a = kv.decode_assignment("k", raw)
    assert isinstance(a, PartitionAssignment)
    assert a.extra == {"note": "hand-edited"}
    assert json.loads(kv.encode_assignment(a))["note"] == "hand-edited"
    cfg = kv.decode_queue_config("k", b'{"name":"q","future_knob":3}')
    assert isinstance(cfg, QueueConfig)
    assert json.loads(kv.encode_queue_config(cfg))["future_knob"] == 3


def test_bad_values_become_malformed_results_naming_key_and_reason():
    bad = kv.decode_queue_config("zmqueue/queues/q/config", b'{"name":"q","delay_s":9999}')
    assert isinstance(bad, Malformed)
    assert bad.key == "zmqueue/queues/q/config"
    assert "delay" in bad.reason
    assert isinstance(kv.decode_assignment("k", b'{"cluster":"c","replicas":["a","a"]}'),
                      Malformed)
    assert isinstance(kv.decode_assignment("k", b'{"cluster":"c","replicas":["a"],"version":1,'
                                                b'"joining":["b"]}'), Malformed)
    assert isinstance(kv.decode_position("k", b'{"epoch":-1,"seq":0}'), Malformed)
    assert isinstance(kv.decode_position("k", b'{"epoch":true,"seq":0}'), Malformed)
    assert isinstance(kv.decode_leader("k", None), Malformed)
    assert isinstance(kv.decode_drain("k", b"yes"), Malformed)


def test_an_empty_drain_flag_means_not_draining():
    assert kv.decode_drain("k", None) is False
    assert kv.decode_drain("k", b"") is False


@given(st.binary(max_size=300))
def test_decoders_never_raise_on_arbitrary_bytes(raw):
    for decode in DECODERS:
        decode("k", raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=5),
    max_leaves=6,
)
field_names = st.sampled_from(["name", "cluster", "replicas", "version", "node", "endpoint",
                               "epoch", "seq", "since_ms", "partitions", "fifo", "delay_s",
                               "dead_letter_queue", "fsync", "max_messages"])


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(field_names, json_values, max_size=8))
def test_decoders_never_raise_on_arbitrary_json_objects(obj):
    raw = json.dumps(obj).encode()
    for decode in DECODERS:
        decode("k", raw)


def test_parse_tree_builds_a_typed_snapshot():
    cfg = QueueConfig("orders", partitions=4)
    items = [
        item("zmqueue/", None),
        item("zmqueue/queues/orders/config", kv.encode_queue_config(cfg), index=11),
        item(kv.partition_key(PID), kv.encode_assignment(PartitionAssignment("c1", ("a", "b")))),
        item(kv.leader_key(PID), kv.encode_leader(LeaderRecord("a", "tcp://a", 3)),
             session="s1", lock_index=4),
        item(kv.position_key(PID, "a"), kv.encode_position(Position(4, 10))),
        item(kv.external_manager_key(), kv.encode_manager(ManagerRecord("a", 5)), session="s1"),
        item(kv.cluster_manager_key("c1"), kv.encode_manager(ManagerRecord("b", 6)), session="s2"),
        item(kv.drain_key("b"), b"true"),
        item("other/prefix", b"ignored"),
    ]
    state, problems = kv.parse_tree(items)
    assert problems == []
    assert state.configs["orders"] == cfg
    assert state.assignments[PID].replicas == ("a", "b")
    assert state.leaders[PID].epoch == 4  # LockIndex is authoritative
    assert state.positions[PID] == {"a": Position(4, 10)}
    assert state.external_manager == ManagerRecord("a", 5)
    assert state.cluster_managers["c1"].node == "b"
    assert state.drains == {"b": True}
    assert state.modify_index["zmqueue/queues/orders/config"] == 11


def test_a_lock_key_without_a_session_is_a_released_lock():
    items = [item(kv.leader_key(PID), kv.encode_leader(LeaderRecord("a", "tcp://a", 3))),
             item(kv.external_manager_key(), kv.encode_manager(ManagerRecord("a", 5)))]
    state, problems = kv.parse_tree(items)
    assert state.leaders == {}
    assert state.external_manager is None
    assert problems == []


def test_parse_tree_reports_and_skips_bad_items():
    items = [
        item("zmqueue/queues/q/config", b"{not json"),
        item("zmqueue/queues/q/partitions/x", b'{"cluster":"c","replicas":[],"version":0}'),
        item("zmqueue/mystery/key", b"1"),
        item("zmqueue/hosts/n1/drain", "not bytes"),
        {"Value": b"no key"},
        item("zmqueue/hosts/n2/drain", b"false"),
    ]
    state, problems = kv.parse_tree(items)
    assert state.drains == {"n2": False}
    assert len(problems) == 5
    assert {p.key for p in problems} >= {"zmqueue/queues/q/config", "zmqueue/mystery/key"}


LISTINGS = st.lists(st.fixed_dictionaries(
    {"Key": st.one_of(st.text(max_size=30), st.sampled_from([
        "zmqueue/queues/q/config", "zmqueue/queues/q/partitions/1", "zmqueue/leaders/q/1",
        "zmqueue/positions/q/1/n", "zmqueue/managers/external", "zmqueue/hosts/n/drain"]),
        st.text(max_size=20).map(lambda s: "zmqueue/" + s)),
     "Value": st.none() | st.binary(max_size=60),
     "Session": st.none() | st.just("s"),
     "LockIndex": st.integers(-2, 5)}), max_size=10)


@given(LISTINGS)
def test_parse_tree_never_raises(items):
    kv.parse_tree(items)


def valid_listing(n_queues: int, version: int) -> list[dict[str, Any]]:
    """A tree of well-formed items; ``version`` changes some of the values."""
    out = []
    for i in range(n_queues):
        pid = kv.PartitionId(f"q{i}", 0)
        cfg = QueueConfig(f"q{i}", visibility_timeout_s=30 + (version if i % 2 else 0))
        out.append(item(kv.queue_config_key(cfg.name), kv.encode_queue_config(cfg)))
        out.append(item(kv.partition_key(pid), kv.encode_assignment(
            PartitionAssignment("c1", ("a", "b"), 1 + (version if i % 3 == 0 else 0)))))
        out.append(item(kv.leader_key(pid), kv.encode_leader(LeaderRecord("a", "tcp://a", 0)),
                        session="s1", lock_index=1 + version))
    return out


@given(st.lists(st.one_of(LISTINGS, st.builds(valid_listing, st.integers(0, 6), st.integers(0, 3))),
                min_size=1, max_size=6))
def test_a_decode_memo_never_changes_what_a_listing_parses_to(listings):
    memo = kv.DecodeMemo()
    for items in listings:
        assert kv.parse_tree(items, memo) == kv.parse_tree(items)


def test_a_decode_memo_decodes_only_the_values_that_changed():
    memo = kv.DecodeMemo()
    kv.parse_tree(valid_listing(6, 0), memo)
    assert memo.decoded == 18
    kv.parse_tree(valid_listing(6, 0), memo)
    assert memo.decoded == 0
    state, _ = kv.parse_tree(valid_listing(6, 1), memo)  # odd configs, partitions of q0 and q3
    assert memo.decoded == 3 + 2
    assert state.configs["q1"].visibility_timeout_s == 31
    assert state.leaders[kv.PartitionId("q2", 0)].epoch == 2  # a new LockIndex, same value
    assert state == kv.parse_tree(valid_listing(6, 1))[0]


def _config_state(cfg: QueueConfig, created: int, modified: int) -> kv.ClusterState:
    d = item(kv.queue_config_key(cfg.name), kv.encode_queue_config(cfg), index=modified)
    d["CreateIndex"] = created
    state, problems = kv.parse_tree([d])
    assert problems == []
    return state


def test_an_edit_of_a_fixed_setting_is_a_problem_and_the_old_config_is_kept():
    from zmqueue.controlplane.kvhealth import fixed_setting_edits, keep_last_good

    old = _config_state(QueueConfig("orders", partitions=4), created=5, modified=5)
    assert old.create_index[kv.queue_config_key("orders")] == 5
    edits = {"fifo": QueueConfig("orders", partitions=4, fifo=True),
             "encrypted": QueueConfig("orders", partitions=4, encrypted=True),
             "partitions": QueueConfig("orders", partitions=2),
             "sync_quorum": QueueConfig("orders", partitions=4, sync_quorum="all")}
    for what, cfg in edits.items():
        new = _config_state(cfg, created=5, modified=9)
        [problem] = fixed_setting_edits(old, new)
        assert problem.key == kv.queue_config_key("orders")
        assert what in problem.reason and "fixed once the queue exists" in problem.reason
        assert keep_last_good(old, new, [problem]).configs["orders"] == old.configs["orders"]
    # settable settings, more partitions: not problems
    grown = _config_state(QueueConfig("orders", partitions=8, visibility_timeout_s=5), created=5, modified=9)
    assert fixed_setting_edits(old, grown) == []
    # deleted and created again as another type: a new queue (new CreateIndex), not an edit
    recreated = _config_state(QueueConfig("orders", fifo=True), created=12, modified=12)
    assert fixed_setting_edits(old, recreated) == []


def test_a_fixed_setting_edit_after_a_bad_edit_is_still_refused() -> None:
    """Bad JSON first, then the config with fifo flipped: the queue kept over
    the bad edit keeps its CreateIndex, so the flip is an edit, refused
    (it was taken for a queue deleted and created again, and applied)."""
    from zmqueue.controlplane.kvhealth import fixed_setting_edits, keep_last_good

    key = kv.queue_config_key("orders")
    old = _config_state(QueueConfig("orders"), created=5, modified=5)
    bad_item = item(key, b"{oops", index=7)
    bad_item["CreateIndex"] = 5
    bad, problems = kv.parse_tree([bad_item])
    assert [p.key for p in problems] == [key]
    kept = keep_last_good(old, bad, problems)
    assert kept.configs["orders"] == old.configs["orders"] and kept.create_index[key] == 5
    flipped = _config_state(QueueConfig("orders", fifo=True), created=5, modified=9)
    [problem] = fixed_setting_edits(kept, flipped)
    assert "fifo False -> True" in problem.reason
    assert keep_last_good(kept, flipped, [problem]).configs["orders"].fifo is False


def test_a_config_edit_that_drops_a_setting_is_a_problem_naming_it_and_the_typo() -> None:
    """(A misspelled setting, ``retension_s``, was kept as an unknown field
    while ``retention_s``, now missing, silently went back to its default.)"""
    import json

    from zmqueue.controlplane.kvhealth import fixed_setting_edits, keep_last_good

    key = kv.queue_config_key("orders")
    old = _config_state(QueueConfig("orders", retention_s=86400), created=5, modified=5)
    raw = json.loads(kv.encode_queue_config(QueueConfig("orders", retention_s=86400)))
    raw["retension_s"] = raw.pop("retention_s")
    typo_item = item(key, json.dumps(raw).encode(), index=9)
    typo_item["CreateIndex"] = 5
    typo, problems = kv.parse_tree([typo_item])
    assert problems == [] and typo.configs["orders"].retention_s == QueueConfig("x").retention_s
    [problem] = fixed_setting_edits(old, typo)
    assert "missing retention_s (was 86400)" in problem.reason
    assert "unknown field(s) retension_s: a typo?" in problem.reason
    assert keep_last_good(old, typo, [problem]).configs["orders"].retention_s == 86400
    # a setting dropped whose default is its value changes nothing: not a problem
    raw = json.loads(kv.encode_queue_config(QueueConfig("orders", retention_s=86400)))
    del raw["delay_s"]
    same_item = item(key, json.dumps(raw).encode(), index=11)
    same_item["CreateIndex"] = 5
    assert fixed_setting_edits(old, kv.parse_tree([same_item])[0]) == []


def test_a_config_edit_adding_a_misspelled_setting_is_a_problem_naming_the_setting() -> None:
    """(An operator adding ``visibilty_timeout_s: 60`` beside the real
    setting saw the edit accepted: kept as an unknown field, it changed
    nothing.) Unknown fields far from every setting's name stay accepted."""
    import json

    from zmqueue.controlplane.kvhealth import fixed_setting_edits, keep_last_good

    key = kv.queue_config_key("orders")
    old = _config_state(QueueConfig("orders", visibility_timeout_s=30), created=5, modified=5)

    def edited(index: int, **fields: object) -> kv.ClusterState:
        raw = json.loads(kv.encode_queue_config(QueueConfig("orders", visibility_timeout_s=30)))
        raw.update(fields)
        it = item(key, json.dumps(raw).encode(), index=index)
        it["CreateIndex"] = 5
        state, problems = kv.parse_tree([it])
        assert problems == []
        return state

    typo = edited(9, visibilty_timeout_s=60, delay_s=5)
    [problem] = fixed_setting_edits(old, typo)
    assert problem.key == key
    assert "unknown field 'visibilty_timeout_s' (a typo of 'visibility_timeout_s'?)" in problem.reason
    kept = keep_last_good(old, typo, [problem]).configs["orders"]
    assert kept.delay_s == 0 and kept.visibility_timeout_s == 30
    # still refused while the field stays (the kept config is compared with the next snapshot)
    still = edited(11, visibilty_timeout_s=60)
    assert len(fixed_setting_edits(keep_last_good(old, typo, [problem]), still)) == 1
    # a field no setting is near (a newer version's setting, a note) is kept, not a problem
    noted = edited(13, owner_team="payments", delay_s=5)
    assert fixed_setting_edits(old, noted) == []
    assert noted.configs["orders"].extra == {"owner_team": "payments"}


def test_a_positions_listing_decodes_by_stream_and_skips_what_it_cannot_read():
    from zmqueue.controlplane.kvlayout import POSITIONS_PREFIX, Position, decode_stream_positions

    items = [{"Key": f"{POSITIONS_PREFIX}q/0/n1/n2", "Value": b'{"epoch": 2, "seq": 7}'},
             {"Key": f"{POSITIONS_PREFIX}q/0/fifo/n1", "Value": b'{"epoch": 1, "seq": 3}'},
             {"Key": f"{POSITIONS_PREFIX}q/x/fifo/n1", "Value": b'{"epoch": 1, "seq": 3}'},  # partition
             {"Key": f"{POSITIONS_PREFIX}q/0/fifo", "Value": b'{"epoch": 1, "seq": 3}'},  # no node
             {"Key": f"{POSITIONS_PREFIX}q/1/fifo/n3", "Value": b"not json"}]
    assert decode_stream_positions(items) == {("q", 0, "n1"): {"n2": Position(2, 7)},
                                              ("q", 0, "fifo"): {"n1": Position(1, 3)}}
    assert decode_stream_positions(None) == {}


def test_a_config_carries_its_keys_create_index_as_the_queues_incarnation() -> None:
    """A queue deleted and created again with the same settings has the same
    raw config: the memo must not hand back the earlier queue's incarnation."""
    memo = kv.DecodeMemo()
    raw = kv.encode_queue_config(QueueConfig("orders"))

    def listing(created: int) -> list[dict[str, object]]:
        d = item(kv.queue_config_key("orders"), raw, index=created)
        d["CreateIndex"] = created
        return [d]

    first, _ = kv.parse_tree(listing(5), memo)
    again, _ = kv.parse_tree(listing(5), memo)
    recreated, _ = kv.parse_tree(listing(9), memo)
    assert first.configs["orders"].incarnation == 5
    assert again.configs["orders"] is first.configs["orders"]  # reused while the key is the same
    assert recreated.configs["orders"].incarnation == 9
    assert recreated.configs["orders"].same_settings(first.configs["orders"])
    assert "incarnation" not in recreated.configs["orders"].to_dict()  # not a setting: not in KV
    assert QueueConfig.from_dict({"name": "orders", "incarnation": 3}).incarnation == 0


def test_the_kv_warning_says_a_bad_policy_denies_instead_of_keeping_a_value() -> None:
    from zmqueue.controlplane.kvhealth import describe

    config = kv.Malformed(kv.queue_config_key("q"), "not JSON")
    policy = kv.Malformed(f"{kv.PREFIX}policies/q", "not JSON")
    assert describe([config]).startswith("bad values in Consul KV (last good value kept): ")
    assert "a bad policy denies everyone but hosts" in describe([config, policy])


def test_a_streams_acked_floor_sits_beside_its_positions_and_no_position_reader_takes_it_for_a_node():
    pid = kv.PartitionId("orders", 2)
    items = [item(kv.stream_position_key(pid, "fifo", "h1"), kv.encode_position(kv.Position(3, 40))),
             item(kv.stream_acked_key(pid, "fifo"), kv.encode_acked(37)),
             item(kv.stream_acked_key(kv.PartitionId("bad", 0), "fifo"), b"{not json")]
    assert kv.stream_acked_key(pid, "fifo") == "zmqueue-positions/orders/2/fifo/~acked"
    assert kv.decode_stream_acked(items) == {("orders", 2, "fifo"): 37}
    assert kv.decode_stream_positions(items) == {("orders", 2, "fifo"): {"h1": kv.Position(3, 40)}}
    assert kv.decode_stream_seen(items) == {("orders", 2, "fifo"): {"h1": 0}}


def test_deletion_tombstones_name_the_incarnation_deleted() -> None:
    raw = kv.encode_tombstone(42, 1_700_000_000_000)
    state, problems = kv.parse_tree([{"Key": kv.deleted_key("orders"), "Value": raw, "CreateIndex": 50},
                                     {"Key": kv.deleted_key("bad"), "Value": b'{"incarnation": "x"}'}])
    assert state.deleted == {"orders": 42}
    assert [p.key for p in problems] == [kv.deleted_key("bad")]
    # written like every value: compact, keys sorted (docs/CONSUL_KV.md)
    assert kv.encode_tombstone(42, 7, "t0") == b'{"at_ms":7,"by":"t0","incarnation":42}'


def test_a_config_gone_while_its_partitions_remain_keeps_its_last_good_value() -> None:
    """(Deleting only a queue's config key made every host remove its data.)"""
    from zmqueue.controlplane.kvhealth import keep_last_good, vanished_configs

    cfg = kv.encode_queue_config(QueueConfig("orders"))
    part = kv.encode_assignment(kv.PartitionAssignment("c1", ("h1",)))
    full: list[dict[str, Any]] = [{"Key": kv.queue_config_key("orders"), "Value": cfg, "CreateIndex": 5},
            {"Key": kv.partition_key(kv.PartitionId("orders", 0)), "Value": part}]
    prev, _ = kv.parse_tree(full)
    without, problems = kv.parse_tree(full[1:])
    found = vanished_configs(prev, without, problems)
    assert [p.key for p in found] == [kv.queue_config_key("orders")]
    assert "put the config back (a new incarnation" in found[0].reason  # (in-flight receipts)
    assert "messages in flight are delivered again" in found[0].reason
    assert keep_last_good(prev, without, found).configs == prev.configs
    deleted, problems = kv.parse_tree([])  # DELETE_QUEUE removes the partitions too: no problem
    assert vanished_configs(prev, deleted, problems) == []


def _assigned(replicas: list[str], version: int, cluster: str = "c1") -> kv.ClusterState:
    value = json.dumps({"cluster": cluster, "replicas": replicas, "version": version}).encode()
    state, problems = kv.parse_tree([item(kv.partition_key(PID), value, index=version)])
    assert problems == []
    return state


def test_a_replicas_edit_naming_unregistered_hosts_is_a_problem_and_the_old_replicas_are_kept() -> None:
    """(A mistyped node id was applied: the manager's next change needed the
    ghosts to confirm it and the partition refused sends until the key was
    edited again.)"""
    from zmqueue.controlplane.discovery import HostInfo
    from zmqueue.controlplane.kvhealth import keep_last_good, unknown_replica_edits

    hosts = [HostInfo("h1", "c1", "1", "tcp://h1:1", "passing"),
             HostInfo("h2", "c1", "1", "tcp://h2:1", "critical"),  # down, but a host of c1
             HostInfo("h3", "c1", "1", "tcp://h3:1", "passing"),
             HostInfo("x1", "c2", "1", "tcp://x1:1", "passing")]
    old = _assigned(["h1", "h2", "h3"], 3)
    typo = _assigned(["h1", "hh2", "hh3"], 50)
    [problem] = unknown_replica_edits(old, typo, hosts)
    assert problem.key == kv.partition_key(PID)
    assert "['hh2', 'hh3']" in problem.reason and "not registered hosts of cluster 'c1'" in problem.reason
    assert "(its hosts: h1, h2, h3)" in problem.reason
    assert keep_last_good(old, typo, [problem]).assignments[PID] == old.assignments[PID]
    # the recovery edit the operator guide describes (a down host dropped), a host that is
    # down named again, a move to another cluster's hosts: not problems
    assert unknown_replica_edits(old, _assigned(["h1", "h3"], 4), hosts) == []
    assert unknown_replica_edits(_assigned(["h1", "h3"], 4), _assigned(["h1", "h3", "h2"], 5), hosts) == []
    assert unknown_replica_edits(old, _assigned(["x1"], 4, cluster="c2"), hosts) == []
    # a host of another cluster, or a replica that deregistered since: only new names count
    [wrong] = unknown_replica_edits(old, _assigned(["h1", "x1"], 4), hosts)
    assert "['x1']" in wrong.reason
    assert unknown_replica_edits(old, _assigned(["h1", "h2", "h3"], 4), hosts[:1]) == []
    # the host being added registers: the same value is no longer a problem
    added = [*hosts, HostInfo("hh2", "c1", "1", "", "passing"), HostInfo("hh3", "c1", "1", "", "passing")]
    assert unknown_replica_edits(old, typo, added) == []


def _configs_state(*configs: tuple[QueueConfig, int]) -> kv.ClusterState:
    """A state of these queue configs, each with its CreateIndex."""
    items = []
    for cfg, created in configs:
        d = item(kv.queue_config_key(cfg.name), kv.encode_queue_config(cfg), index=created)
        d["CreateIndex"] = created
        items.append(d)
    state, problems = kv.parse_tree(items)
    assert problems == []
    return state


def test_a_config_edit_naming_an_unfit_or_missing_dead_letter_queue_is_refused() -> None:
    """(A KV edit naming a FIFO dead-letter queue for a standard queue, or a
    queue that does not exist, applied without a word: the dead letters were
    then held out of delivery for good, with one host-log line.)"""
    from zmqueue.controlplane.kvhealth import dead_letter_problems, describe, keep_last_good

    src, dlq = QueueConfig("orders", dead_letter_queue="orders-dlq"), QueueConfig("orders-dlq")
    fifo, plain = QueueConfig("x.fifo", fifo=True), QueueConfig("plain")
    old = _configs_state((src, 5), (dlq, 4), (fifo, 6), (plain, 7))
    assert dead_letter_problems(old, old) == []
    key = kv.queue_config_key("orders")
    for target, says in (("x.fifo", "'x.fifo' is a FIFO queue; the dead-letter queue of standard queue "
                                    "'orders' must be a standard queue"),
                         ("nope", "dead_letter_queue 'nope' names no queue")):
        edited = _configs_state((QueueConfig("orders", dead_letter_queue=target), 5), (dlq, 4), (fifo, 6),
                                (plain, 7))
        [problem] = dead_letter_problems(old, edited)
        assert problem.key == key and problem.keep and says in problem.reason, problem.reason
        assert "keeps its previous config (dead-letter queue 'orders-dlq')" in problem.reason
        assert keep_last_good(old, edited, [problem]).configs["orders"].dead_letter_queue == "orders-dlq"
    # an encrypted queue's dead letters never go to an unencrypted queue (create refuses it too)
    enc_old = _configs_state((QueueConfig("orders", encrypted=True, dead_letter_queue="e"), 5),
                             (QueueConfig("e", encrypted=True), 3), (plain, 7))
    enc_new = _configs_state((QueueConfig("orders", encrypted=True, dead_letter_queue="plain"), 5),
                             (QueueConfig("e", encrypted=True), 3), (plain, 7))
    [problem] = dead_letter_problems(enc_old, enc_new)
    assert "'plain' is not encrypted" in problem.reason and problem.keep
    # the missing one created: the same value applies
    made = _configs_state((QueueConfig("orders", dead_letter_queue="nope"), 5), (dlq, 4),
                          (QueueConfig("nope"), 9))
    assert dead_letter_problems(old, made) == []
    # the dead-letter queue deleted since (the source not edited): a warning only, naming both
    gone = _configs_state((src, 5))
    [warning] = dead_letter_problems(_configs_state((src, 5), (dlq, 4)), gone)
    assert warning.key == key and not warning.keep
    assert "'orders-dlq' names no queue (deleted since?)" in warning.reason
    assert "dead letters of orders wait in it" in warning.reason
    assert describe([warning]).startswith("bad values in Consul KV (applied as they are): ")
    # ... which refuses no other edit of the source (looked at once the edit applied)
    edited = _configs_state((QueueConfig("orders", dead_letter_queue="orders-dlq", visibility_timeout_s=9),
                             5))
    assert dead_letter_problems(gone, edited) == []
    assert keep_last_good(gone, edited, [warning]).configs["orders"].visibility_timeout_s == 9
    # a queue created with a missing dead-letter queue in KV: nothing earlier to keep, a warning
    [new] = dead_letter_problems(_configs_state((dlq, 4)), _configs_state((dlq, 4), (
        QueueConfig("other", dead_letter_queue="nope"), 8)))
    assert not new.keep and new.key == kv.queue_config_key("other")


def test_a_cluster_edit_naming_no_known_cluster_is_a_problem_and_the_old_assignment_is_kept() -> None:
    """(A typo in a partition's ``cluster`` applied: no cluster manager kept
    the partition any more, a drain did nothing, the only log line said the
    cluster "lost quorum", and an empty partition was moved elsewhere.)"""
    from zmqueue.controlplane.discovery import HostInfo
    from zmqueue.controlplane.kvhealth import keep_last_good, unknown_replica_edits

    hosts = [HostInfo("h1", "c1", "1", "tcp://h1:1", "passing"),
             HostInfo("x1", "c2", "1", "tcp://x1:1", "critical"),  # c2: every host down, still known
             HostInfo("x2", "c2", "1", "tcp://x2:1", "critical")]
    old = _assigned(["h1"], 3)
    typo = _assigned(["h1"], 4, cluster="c1x")
    [problem] = unknown_replica_edits(old, typo, hosts)
    assert problem.key == kv.partition_key(PID)
    assert "cluster 'c1x' is no known cluster" in problem.reason
    assert "known clusters: c1, c2" in problem.reason
    assert "keeps its previous assignment (cluster 'c1', replicas ['h1'])" in problem.reason
    assert keep_last_good(old, typo, [problem]).assignments[PID] == old.assignments[PID]
    # a move to a cluster whose hosts are all down, or one named by another partition only: not typos
    assert unknown_replica_edits(old, _assigned(["x1", "x2"], 4, cluster="c2"), hosts) == []
    other = kv.PartitionId("other", 0)
    value = json.dumps({"cluster": "c3", "replicas": ["z1"], "version": 1}).encode()
    with_c3, _ = kv.parse_tree([item(kv.partition_key(PID), json.dumps(
        {"cluster": "c1", "replicas": ["h1"], "version": 3}).encode()), item(kv.partition_key(other), value)])
    moved, _ = kv.parse_tree([item(kv.partition_key(PID), json.dumps(
        {"cluster": "c3", "replicas": ["h1"], "version": 4}).encode()), item(kv.partition_key(other), value)])
    assert [p for p in unknown_replica_edits(with_c3, moved, hosts) if "no known cluster" in p.reason] == []
    # the cluster's first host registers: the same value applies
    assert unknown_replica_edits(old, typo, [*hosts, HostInfo("n1", "c1x", "1", "", "passing")]) == []
