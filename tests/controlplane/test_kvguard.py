"""The fence on a queue's lock and position writes (``kvguard``): which
incarnation is alive, what each write checks, how writes are packed into
transactions and how Consul's refusals are read. Pure logic, no Consul."""

from __future__ import annotations

import base64
import json
from typing import Any

import consul

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.kvguard import (
    FENCED,
    GONE,
    INVALID_SESSION,
    NOT_CURRENT,
    Batch,
    Guard,
    QueueGuards,
    batches,
    judge,
    parse_reads,
    read_ops,
    take_lock,
    txn_errors,
    write_fenced,
)


def test_a_queue_never_deleted_is_alive_and_its_writes_check_no_tombstone_appeared() -> None:
    v = judge("q", 40, 0, None, 40)
    assert v == Guard("q", 0)
    assert isinstance(v, Guard) and v.op() == {"KV": {"Verb": "check-not-exists", "Key": "zmqueue/deleted/q"}}


def test_a_queue_created_again_is_alive_with_the_earlier_deletion_as_its_guard() -> None:
    v = judge("q", 90, 77, 40, 90)  # incarnation 40 deleted at index 77, then 90 created
    assert v == Guard("q", 77)
    assert isinstance(v, Guard) and v.op() == {"KV": {"Verb": "check-index", "Key": "zmqueue/deleted/q",
                                                      "Index": 77}}


def test_an_incarnation_a_tombstone_names_is_gone_even_before_its_config_is_deleted() -> None:
    assert judge("q", 40, 77, 40, 40) == GONE  # DELETE_QUEUE writes the tombstone first
    assert judge("q", 40, 77, 40, None) == GONE


def test_an_incarnation_older_than_the_one_a_tombstone_names_is_gone() -> None:
    """Deleted, created again and deleted again before this host caught up."""
    assert judge("q", 40, 120, 90, None) == GONE
    assert judge("q", 40, 120, 90, 130) == GONE


def test_a_stream_of_an_incarnation_that_is_not_the_live_one_waits() -> None:
    assert judge("q", 40, 77, 12, 90) == NOT_CURRENT  # (its config put back by hand: a new incarnation)


def test_a_config_missing_without_a_deletion_keeps_its_hosts_writing() -> None:
    """A config key deleted by hand (or Consul's state lost): the hosts keep
    serving the queue, so its locks and positions are written, guarded by
    the tombstone as it is (a DELETE_QUEUE of a config put back moves it)."""
    assert judge("q", 40, 0, None, None) == Guard("q", 0)
    assert judge("q", 40, 30, 12, None) == Guard("q", 30)


def test_an_unknown_incarnation_is_never_judged_gone_by_a_tombstone() -> None:
    assert judge("q", 0, 77, 40, 90) == Guard("q", 77)
    assert judge("q", 0, 77, 40, None) == Guard("q", 77)


def _item(key: str, value: bytes | None, create: int, modify: int) -> dict[str, Any]:
    return {"KV": {"Key": key, "Value": base64.b64encode(value).decode() if value is not None else None,
                   "CreateIndex": create, "ModifyIndex": modify, "LockIndex": 0, "Flags": 0}}


def test_reads_take_only_each_queues_own_keys_from_the_prefix_listings() -> None:
    ops = read_ops(["orders", "new"])
    assert [o["KV"]["Verb"] for o in ops] == ["get-tree"] * 4
    assert [o["KV"]["Key"] for o in ops] == ["zmqueue/deleted/orders", "zmqueue/queues/orders/config",
                                             "zmqueue/deleted/new", "zmqueue/queues/new/config"]
    answer = {"Results": [
        _item("zmqueue/deleted/orders", kv.encode_tombstone(40, 1), 50, 77),
        _item("zmqueue/deleted/orders-dlq", kv.encode_tombstone(60, 1), 61, 99),  # (a longer name)
        _item("zmqueue/queues/orders/config", b"{}", 90, 95)]}
    assert parse_reads(["orders", "new"], answer) == {"orders": (77, 40, 90), "new": (0, None, None)}
    assert parse_reads(["new"], {"Results": None}) == {"new": (0, None, None)}


def test_an_unreadable_tombstone_names_no_incarnation_but_still_guards() -> None:
    answer = {"Results": [_item("zmqueue/deleted/q", b"not json", 5, 8)]}
    assert parse_reads(["q"], answer) == {"q": (8, None, None)}


def _refusal(*errors: tuple[int, str]) -> consul.ConsulException:
    body = json.dumps({"Results": None, "Errors": [{"OpIndex": i, "What": w} for i, w in errors]}, indent=4)
    return consul.ConsulException(f"409 {body}")


def test_a_refused_transaction_names_the_operations_that_failed() -> None:
    exc = _refusal((0, 'failed index check for key "zmqueue/deleted/q", current modify index 9 != 8'))
    assert txn_errors(exc) == [(0, 'failed index check for key "zmqueue/deleted/q", current modify index '
                                   '9 != 8')]
    assert txn_errors(consul.ConsulException("500 rpc error making call: no leader")) == []
    assert txn_errors(consul.ConsulException("409 not json")) == []


def _sets(queue: str, n: int) -> list[dict[str, Any]]:
    return [{"KV": {"Verb": "set", "Key": f"zmqueue-positions/{queue}/{i}/o/n", "Value": ""}}
            for i in range(n)]


def test_every_run_of_a_queues_writes_is_led_by_its_guard_within_consuls_64_operations() -> None:
    guards = {"a": Guard("a", 0), "b": Guard("b", 7), "c": Guard("c", 3)}
    out = batches({"a": _sets("a", 100), "b": _sets("b", 3), "c": _sets("c", 40)}, guards)
    assert all(len(b.ops) <= 64 for b in out)
    written = [op for b in out for op in b.ops if op["KV"]["Verb"] == "set"]
    assert len(written) == 143
    for b in out:
        for i, (op, q) in enumerate(zip(b.ops, b.queues, strict=True)):
            if op["KV"]["Verb"] == "set":
                assert q in op["KV"]["Key"]
                first = b.queues.index(q)  # the run of this queue in this batch starts with its guard
                assert b.ops[first] == guards[q].op() and first < i
    assert sum(1 for b in out for op in b.ops if op == guards["a"].op()) == 2  # 100 sets: two runs


def test_a_batch_refused_by_guards_alone_names_their_queues_and_keeps_the_rest() -> None:
    guards = {"a": Guard("a", 0), "b": Guard("b", 7)}
    (batch,) = batches({"a": _sets("a", 2), "b": _sets("b", 2)}, guards)
    assert batch.fenced([(3, 'failed index check for key "zmqueue/deleted/b"')]) == {"b"}
    assert batch.fenced([(1, "some set failed")]) is None  # not a guard: a real error
    assert batch.fenced([]) is None
    rest = batch.without({"b"})
    assert rest == Batch(batch.ops[:3], ["a", "a", "a"])


class ScriptedTxns:
    """A plain object standing in for the client in these pure-logic tests
    (which transactions QueueGuards builds, what it makes of scripted
    answers); the same paths against a real Consul agent are in
    tests/controlplane_integration/test_deleted_queue_keys.py. ``client.call(fn)``
    runs ``fn`` on this: ``txn.put`` answers reads from ``kv`` and a lock as
    taken at LockIndex 3, or raises the next of ``refusals``."""

    def __init__(self) -> None:
        self.kv: dict[str, tuple[bytes, int, int]] = {}
        self.txns: list[list[dict[str, Any]]] = []
        self.refusals: list[consul.ConsulException] = []
        self.txn = self

    def call(self, fn: Any) -> Any:
        return fn(self)

    def put(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.txns.append(ops)
        if self.refusals:
            raise self.refusals.pop(0)
        results: list[dict[str, Any]] = []
        for op in ops:
            body = op["KV"]
            if body["Verb"] == "get-tree":
                results += [_item(k, v, c, m) for k, (v, c, m) in self.kv.items()
                            if k.startswith(body["Key"])]
            if body["Verb"] == "lock":
                results.append({"KV": {"Key": body["Key"], "Session": body["Session"], "LockIndex": 3}})
        return {"Results": results, "Errors": None}


def test_verdicts_are_read_once_per_incarnation_and_again_when_asked() -> None:
    scripted = ScriptedTxns()
    scripted.kv["zmqueue/queues/q/config"] = (b"{}", 40, 40)
    guards = QueueGuards(scripted)  # type: ignore[arg-type]
    guards.resolve({"q": 40})
    guards.resolve({"q": 40})
    assert guards.reads == 1 and guards.of("q", 40) == Guard("q", 0) and guards.of("q", 41) is None
    scripted.kv["zmqueue/deleted/q"] = (kv.encode_tombstone(40, 1), 50, 50)  # DELETE_QUEUE
    guards.recheck("q")  # (its lock vanished, or a write's guard failed)
    guards.resolve({"q": 40})
    assert guards.reads == 2 and guards.of("q", 40) == GONE
    scripted.kv["zmqueue/queues/q/config"] = (b"{}", 60, 60)  # created again
    guards.resolve({"q": 60})
    assert guards.reads == 3 and guards.of("q", 60) == Guard("q", 50)
    assert guards.judged("q", 40) == GONE  # (the earlier incarnation, judged on the same read)
    guards.resolve({})
    assert guards.of("q", 60) is None  # forgotten with its streams


def test_a_lock_is_taken_with_its_guard_and_consuls_refusals_are_told_apart() -> None:
    scripted = ScriptedTxns()
    guard = Guard("q", 50)
    client: Any = scripted
    assert take_lock(client, "zmqueue/leaders/q/0/n1", b"{}", "sid", guard) == 3
    assert scripted.txns[-1][0] == guard.op() and scripted.txns[-1][1]["KV"]["Verb"] == "lock"
    scripted.refusals = [_refusal((0, 'failed index check for key "zmqueue/deleted/q"')),
                     _refusal((1, 'failed to lock key "k", lock is already held')),
                     _refusal((1, 'invalid session "sid"'))]
    assert take_lock(client, "k", b"{}", "sid", guard) == FENCED
    assert take_lock(client, "k", b"{}", "sid", guard) == 0
    assert take_lock(client, "k", b"{}", "sid", guard) == INVALID_SESSION


def test_positions_of_a_queue_deleted_meanwhile_are_dropped_and_the_others_written() -> None:
    scripted = ScriptedTxns()
    guards = {"a": Guard("a", 0), "b": Guard("b", 7)}
    scripted.refusals = [_refusal((3, 'failed index check for key "zmqueue/deleted/b"'))]
    client: Any = scripted
    assert write_fenced(client, {"a": _sets("a", 2), "b": _sets("b", 2)}, guards) == {"b"}
    first, second = scripted.txns
    assert len(first) == 6 and second == first[:3]  # retried with a's guard and writes alone
