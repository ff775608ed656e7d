"""Pure pieces of the front door: buckets, policies, ZAP decisions, KV decoding, usage files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zmq

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.errors import AccessDenied, ConfigError, Throttled
from zmqueue.protocol import Command, Flags, Frame, Receipt
from zmqueue.security import authz
from zmqueue.security.frontdoor import UNKNOWN_QUEUE, FrontDoor, queue_of
from zmqueue.security.ratelimit import RateLimiter
from zmqueue.security.usage import UsageBook, aggregate, find_files
from zmqueue.security.zap import KeyEntry, ZapHandler


def test_a_token_bucket_allows_its_burst_then_names_the_wait() -> None:
    rl = RateLimiter()
    assert [rl.take(("k",), 2.0, 2.0, 0.0) for _ in range(2)] == [0, 0]
    assert rl.take(("k",), 2.0, 2.0, 0.0) == 500
    assert rl.take(("k",), 2.0, 2.0, 0.25) == 250
    assert rl.take(("k",), 2.0, 2.0, 0.5) == 0
    with pytest.raises(Throttled) as exc:
        rl.check(("k",), 2.0, 2, 0.5, "queue 'q'")
    assert exc.value.details["retry_after_ms"] == 500


def test_policies_allow_listed_identities_and_deny_naming_action_and_queue() -> None:
    pol = authz.parse_policy({"send": ["alice"], "receive": ["*"]})
    authz.check(pol, "send", "q", "alice")
    authz.check(pol, "receive", "q", "bob")
    authz.check(None, "admin", "q", "anyone")
    with pytest.raises(AccessDenied) as exc:
        authz.check(pol, "delete", "q", "alice")
    assert exc.value.details == {"action": "delete", "queue": "q", "identity": "alice"}
    with pytest.raises(ValueError):
        authz.parse_policy({"steal": ["x"]})


def test_kv_decodes_keys_and_policies_and_reports_bad_ones() -> None:
    items = [
        {"Key": "zmqueue/keys/global/alice", "Value": json.dumps(
            {"public": "x" * 40, "role": "client", "name": "alice"}).encode()},
        {"Key": "zmqueue/keys/c1/h1", "Value": b'{"public": "short", "role": "host", "name": "h1"}'},
        {"Key": "zmqueue/policies/q", "Value": b'{"send": ["alice"]}'},
        {"Key": "zmqueue/policies/bad", "Value": b'{"send": "alice"}'},
    ]
    state, problems = kv.parse_tree(items)
    assert state.keys == {("global", "alice"): kv.KeyRecord("x" * 40, "client", "alice")}
    assert state.policies == {"q": {"send": ("alice",)}, "bad": {authz.MALFORMED: ()}}  # denies all
    assert sorted(p.key for p in problems) == ["zmqueue/keys/c1/h1", "zmqueue/policies/bad"]


def test_zap_admits_registered_keys_and_host_keys_only_on_the_peer_domain() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    zap = ZapHandler(ctx)
    try:
        cpub, _ = zmq.curve_keypair()
        hpub, _ = zmq.curve_keypair()
        zap.set_keys({cpub: KeyEntry("alice", "client"), hpub: KeyEntry("h1", "host")})
        raw = zmq.utils.z85.decode
        assert zap.decide("client", b"CURVE", raw(cpub))[:2] == (True, "alice")
        assert zap.decide("peer", b"CURVE", raw(cpub))[0] is False
        assert zap.decide("peer", b"CURVE", raw(hpub))[:2] == (True, "h1")
        assert zap.decide("client", b"CURVE", bytes(32))[0] is False
        assert zap.decide("client", b"NULL", b"")[0] is False
    finally:
        zap.stop()
        ctx.term()


def test_the_front_door_reads_the_queue_a_receipt_names() -> None:
    r = Receipt("secret-q", 0, "h1", 5, 1, 1).encode()
    f = Frame(Command.DELETE, Flags.NONE, 1, {"q": "public-q", "p": 0, "r": [r]})
    assert queue_of(f) == "secret-q"
    cfg = QueueConfig("q", rate_limit_per_s=1, rate_burst=1).validate()
    door = FrontDoor(lambda: {"q": cfg}, lambda: {}, lambda u: None, None)
    send = Frame(Command.SEND, Flags.NONE, 1, {"q": "q", "m": []})
    assert door.check("client", "alice", send, 10) == (None, "q")
    assert isinstance(door.check("client", "alice", send, 10).refused, Throttled)
    assert door.check("peer", None, send, 10).refused is None  # host traffic is not limited
    assert door.queues["q"].throttled == 1


def test_queue_configs_validate_the_new_fields() -> None:
    assert QueueConfig.from_dict({"name": "q", "encrypted": True, "rate_limit_per_s": 5}).encrypted
    with pytest.raises(ConfigError):
        QueueConfig("q", rate_limit_per_s=0).validate()
    with pytest.raises(ConfigError):
        QueueConfig("q", rate_burst=0).validate()


def test_usage_records_append_and_aggregate(tmp_path: Path) -> None:
    for node in ("h1", "h2"):
        book = UsageBook(tmp_path / node, node)
        (tmp_path / node).mkdir()
        book.add("alice", "q", 2, 100, 10)
        book.add("bob", "q", 1, 5, 1)
        book.flush(10**13)
        book.add("alice", "q", 1, 1, 1)
        book.flush(10**13 + 1)
    (tmp_path / "h1" / "usage.jsonl").open("a").write('{"torn')
    rows = aggregate(find_files([tmp_path]))
    assert rows == [{"identity": "alice", "queue": "q", "requests": 6, "bytes_in": 202, "bytes_out": 22},
                    {"identity": "bob", "queue": "q", "requests": 2, "bytes_in": 10, "bytes_out": 2}]


def test_a_receive_that_carries_deletes_needs_the_delete_permission_too() -> None:
    policies = {"q": {"receive": ("bob", "carol"), "delete": ("carol",)}}
    door = FrontDoor(lambda: {"q": QueueConfig("q")}, lambda: policies, lambda u: None, None)
    r = Receipt("q", 0, "h1", 5, 1, 1).encode()
    plain = Frame(Command.RECEIVE, Flags.NONE, 1, {"q": "q", "max": 10})
    carrying = Frame(Command.RECEIVE, Flags.NONE, 2, {"q": "q", "max": 10, "del": [r]})
    assert door.check("client", "bob", plain, 10) == (None, "q")
    denied = door.check("client", "bob", carrying, 10).refused
    assert isinstance(denied, AccessDenied) and denied.details["action"] == "delete"
    assert door.check("client", "carol", carrying, 10) == (None, "q")
    door.on_reply("client", "carol", carrying, 0.0, {"m": [], "dr": [None, {"code": 1}]}, 10, "q")
    assert door.queues["q"].deletes == 1
    # a push subscription's credit that carries the delete: the receipt names the queue
    credit = Frame(Command.CREDIT, Flags.NONE, 3, {"sub": 7, "n": 1, "del": [r]})
    assert isinstance(door.check("client", "bob", credit, 10).refused, AccessDenied)
    assert door.check("client", "carol", credit, 10) == (None, "q")
    assert door.check("client", "bob", Frame(Command.CREDIT, Flags.NONE, 4, {"sub": 7, "n": 1}), 10) \
        == (None, "")
    # deletes carried by reference (dref: the messages of a column group) need it too
    by_ref = Frame(Command.RECEIVE, Flags.NONE, 5, {"q": "q", "max": 10, "cols": True,
                                                     "dref": ["h1", [5], [1]]})
    denied = door.check("client", "bob", by_ref, 10).refused
    assert isinstance(denied, AccessDenied) and denied.details["action"] == "delete"
    assert door.check("client", "carol", by_ref, 10) == (None, "q")


def test_a_credit_deleting_by_reference_is_checked_on_the_queue_it_deletes_from() -> None:
    """(A CREDIT with ``dref`` and a ``del`` the front door could not decode,
    or one naming another queue, was checked on that queue or not at all,
    while the handler deleted ``dref`` from the subscription's queue.)"""
    policies = {"q": {"receive": ("bob", "carol"), "delete": ("carol",)}}
    door = FrontDoor(lambda: {}, lambda: policies, lambda u: None, None)
    other = Receipt("openq", 0, "h1", 5, 1, 1).encode()
    for extra in ({"del": ["x"]}, {"del": [other]}, {}):
        credit = Frame(Command.CREDIT, Flags.NONE, 1, {"sub": 7, "n": 10, "q": "q",
                                                       "dref": ["h1", [5], [1]], **extra})
        denied = door.check("client", "bob", credit, 10).refused
        assert isinstance(denied, AccessDenied) and denied.details["action"] == "delete", extra


def test_a_name_registered_with_keys_of_both_roles_counts_as_a_client() -> None:
    """(A client key registered under a host's name passed as a host: no
    policy or rate limit applied to it.)"""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    zap = ZapHandler(ctx)
    try:
        hpub, _ = zmq.curve_keypair()
        mpub, _ = zmq.curve_keypair()
        zap.set_keys({hpub: KeyEntry("c1-h1", "host")})
        assert zap.role_of("c1-h1") == "host"
        zap.set_keys({hpub: KeyEntry("c1-h1", "host"), mpub: KeyEntry("c1-h1", "client")})
        assert zap.role_of("c1-h1") == "client" and zap.mixed == {"c1-h1"}
        zap.set_keys({hpub: KeyEntry("c1-h1", "host")})
        assert zap.role_of("c1-h1") == "host" and zap.mixed == set()
    finally:
        zap.stop()
        ctx.term()


def test_receives_and_redeliveries_in_column_groups_are_counted() -> None:
    door = FrontDoor(lambda: {}, lambda: {}, lambda u: None, None)
    frame = Frame(Command.RECEIVE, Flags.NONE, 1, {"q": "q", "max": 10, "cols": True})
    group = ["h1", 1, bytes(48), [b"a", b"b", b"c"], [1, 2, 3], [1, 2, 1], [0, 0, 0]]
    door.on_reply("client", None, frame, 0.0, {"m": [], "ms": [group]}, 10, "q")
    assert (door.queues["q"].receives, door.queues["q"].redeliveries) == (3, 1)


def test_sends_answered_with_joined_ids_are_counted_per_message() -> None:
    door = FrontDoor(lambda: {}, lambda: {}, lambda u: None, None)
    frame = Frame(Command.SEND, Flags.NONE, 1, {"q": "q", "b": [b"a", b"b", b"c"]})
    door.on_reply("client", None, frame, 0.0, {"ib": bytes(48)}, 10, "q")
    door.on_reply("client", None, frame, 0.0, {"ids": ["0" * 32, "1" * 32]}, 10, "q")
    assert door.queues["q"].sends == 5


def test_key_files_that_are_not_text_or_not_z85_are_config_errors(tmp_path: Path) -> None:
    """(A binary at-rest key file crashed the host with UnicodeDecodeError;
    z85 keys with characters outside the alphabet gave KeyError or
    struct.error tracebacks in every command, and a bare 40-character line
    of them was registered as a public key.)"""
    from zmqueue.security import atrest
    from zmqueue.security.curve import check_key, load_public, load_secret

    binary = tmp_path / "payments.key"
    binary.write_bytes(b"\xaf\xfe" + bytes(range(200)))
    with pytest.raises(ConfigError, match="not a key file"):
        atrest.read_keys(binary)
    for bad in ("~" * 40, "#" * 40):
        with pytest.raises(ConfigError, match="not a z85 CURVE key"):
            check_key(bad)
        bare = tmp_path / "bare.key"
        bare.write_text(bad + "\n")
        with pytest.raises(ConfigError, match="not a z85 CURVE key"):
            load_public(bare)
        cert = tmp_path / "bad.key_secret"
        cert.write_text(f'metadata\ncurve\n    public-key = "{bad}"\n    secret-key = "{bad}"\n')
        with pytest.raises(ConfigError):
            load_secret(cert)
    (tmp_path / "raw.key_secret").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError):
        load_secret(tmp_path / "raw.key_secret")


def test_usage_lines_that_are_not_records_are_skipped(tmp_path: Path) -> None:
    f = tmp_path / "usage.jsonl"
    good = '{"identity": "a", "queue": "q", "t1": 5, "requests": 1, "bytes_in": 2, "bytes_out": 3}\n'
    f.write_bytes((good + '{"identity": "a", "queue": "q", "t1": null, "requests": 1}\n'
                   + '{"identity": "a", "queue": "q", "t1": 5, "requests": "x"}\n').encode()
                  + b"\xff\xfe not text\n" + good.encode())
    assert aggregate([f]) == [{"identity": "a", "queue": "q", "requests": 2, "bytes_in": 4, "bytes_out": 6}]


def test_a_malformed_policy_denies_saying_it_is_malformed() -> None:
    """(The denial read like any other: "admin may not send", nothing about
    the policy being broken, which only the hosts' kv: check said.)"""
    state, problems = kv.parse_tree([{"Key": kv.policy_key("bq"), "Value": b'{"send": ["alice"'}])
    assert [p.key for p in problems] == [kv.policy_key("bq")]
    with pytest.raises(AccessDenied, match="is malformed, so it admits nobody until it is fixed"):
        authz.check(state.policies["bq"], "send", "bq", "alice")
    with pytest.raises(AccessDenied) as plain:
        authz.check({"send": ("bob",)}, "send", "bq", "alice")
    assert "malformed" not in str(plain.value)


def test_a_host_without_a_key_dir_says_how_to_give_it_one() -> None:
    """(It said "put secret.key in its --key-dir", which a host of a plain
    `zmqueue up` does not have.)"""
    from zmqueue.errors import Unavailable
    from zmqueue.security.atrest import KeyDir

    with pytest.raises(Unavailable, match="runs without --key-dir: start it with --key-dir DIR") as info:
        KeyDir(None).cipher("secret").check_readable()
    assert "zmqueue keys data-key --queue secret" in str(info.value)


def test_requests_naming_queues_the_host_does_not_know_are_metered_under_one_name(tmp_path: Path) -> None:
    """(Each made-up name, of any size, got its own counters and usage rows for
    good: 300 PINGs naming a 1 MiB queue took the host from 66 to 367 MiB RSS
    and wrote 301 MB of usage records.)"""
    (tmp_path / "h1").mkdir()
    book = UsageBook(tmp_path / "h1", "h1")
    policies = {"secret": {"receive": ("bob",)}}
    door = FrontDoor(lambda: {"q": QueueConfig("q")}, lambda: policies, lambda u: None, book)
    for i in range(50):
        huge = f"{i}" + "x" * 100_000
        for cmd in (Command.PING, Command.SEND, Command.RECEIVE):
            assert door.check("client", "alice", Frame(cmd, Flags.NONE, i, {"q": huge}), 10) == (
                None, UNKNOWN_QUEUE)
    assert door.check("client", "alice", Frame(Command.SEND, Flags.NONE, 1, {"q": "q"}), 10) == (None, "q")
    create = Frame(Command.CREATE_QUEUE, Flags.NONE, 2, {"config": {"name": "new-q"}})
    assert door.check("client", "alice", create, 10) == (None, "new-q")
    # policies still apply to the name asked for, known or not
    denied = door.check("client", "alice", Frame(Command.RECEIVE, Flags.NONE, 3, {"q": "secret"}), 10)
    assert isinstance(denied.refused, AccessDenied) and denied.queue == UNKNOWN_QUEUE
    assert set(door.queues) == {UNKNOWN_QUEUE, "q", "new-q"}
    book.flush(10**13)
    rows = aggregate(find_files([tmp_path]))
    assert {r["queue"] for r in rows} == {UNKNOWN_QUEUE, "q", "new-q"}
    assert (tmp_path / "h1" / "usage.jsonl").stat().st_size < 10_000


def test_an_at_rest_key_file_readable_by_other_users_is_used_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As a CURVE secret key file is. (It was used silently. Found by QA in
    the forty-sixth session.)"""
    from zmqueue.security.atrest import KeyDir, add_key, key_path

    add_key(tmp_path, "payments")
    path = key_path(tmp_path, "payments")
    with caplog.at_level("WARNING", logger="zmqueue.security.atrest"):
        KeyDir(tmp_path).cipher("payments").check_readable()
    assert "readable by other users" not in caplog.text  # (made 0600)
    path.chmod(0o644)
    with caplog.at_level("WARNING", logger="zmqueue.security.atrest"):
        KeyDir(tmp_path).cipher("payments").check_readable()  # still used
    assert f"{path} is readable by other users (mode 644): chmod 600 it" in caplog.text
