"""Changing a queue's settings after it was created (SQS SetQueueAttributes):
``Queue.set_attributes``, ``zmqueue queue set``; every host applies the new
config to its open streams, stored messages included."""

from __future__ import annotations

import json

import pytest

import zmqueue
from tests.conftest import QueueCluster, wait_for
from zmqueue.cli.main import main as cli
from zmqueue.errors import ConfigError, InvalidParameter, MessageTooLarge
from zmqueue.protocol import Command


def test_new_settings_apply_on_every_host(qcluster: QueueCluster) -> None:
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("set"), visibility_timeout=60, max_message_bytes=65536)
    cfg = q.set_attributes(visibility_timeout=1, max_message_bytes=2048)
    assert (cfg.visibility_timeout_s, cfg.max_message_bytes) == (1, 2048)
    assert q.config == cfg
    other = zmqueue.connect(qcluster.factory.agent.http_addr)
    try:  # answered from the hosts' metadata caches, which follow Consul a moment behind
        wait_for(lambda: (g := other.get_queue(q.name).config)
                 and (g.visibility_timeout_s, g.max_message_bytes, g.retention_s) == (1, 2048, 4 * 86400),
                 10, "the new settings served to another client")
    finally:
        other.close()

    def too_large_refused() -> bool:  # by each host (sends go round robin over the two)
        try:
            q.send(b"x" * 3000)
        except MessageTooLarge:
            return True
        return False

    wait_for(lambda: all(too_large_refused() for _ in range(4)), 20, "2 KiB limit on every host",
             interval_s=0.2)

    def visible_again_after_1s() -> bool:
        q.send(b"m")
        [m] = q.receive(wait_time=5)
        again = q.receive(wait_time=4)
        for x in again:
            q.delete(x)
        return bool(again) and again[0].id == m.id

    wait_for(visible_again_after_1s, 30, "a visibility timeout of 1 s in effect", interval_s=0.2)


def test_retention_and_a_new_dead_letter_queue(qcluster: QueueCluster) -> None:
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("ret"))
    q.send_batch([b"a", b"b", b"c"])
    dlq = qcluster.queue_name("dlq")
    cfg = q.set_attributes(retention=1, dead_letter_queue=dlq, max_receive_count=2)
    assert (cfg.retention_s, cfg.dead_letter_queue, cfg.max_receive_count) == (1, dlq, 2)
    assert c.get_queue(dlq).config.retention_s == 14 * 86400, "created as create_queue does"
    # the messages stored before the change expire under the new retention (open streams
    # are reconfigured, not only new ones)
    wait_for(lambda: q.stats()["total"] == 0, 30, "messages older than 1 s expired", interval_s=0.3)
    assert q.receive(max_messages=10) == []
    other = c.create_queue(qcluster.queue_name("ret2"), dead_letter_queue=dlq)
    # answered from the hosts' metadata caches, which follow Consul a moment behind
    wait_for(lambda: c.list_dead_letter_source_queues(dlq) == sorted([q.name, other.name]), 10,
             "both queues listed as the DLQ's sources")
    assert q.set_attributes(dead_letter_queue=None).dead_letter_queue is None
    wait_for(lambda: c.list_dead_letter_source_queues(dlq) == [other.name], 10,
             "a detached queue no longer listed as a source")
    with pytest.raises(zmqueue.QueueNotFound):
        c.list_dead_letter_source_queues(qcluster.queue_name("no-such-dlq"))


def test_bad_changes_get_a_clear_error_and_change_nothing(qcluster: QueueCluster) -> None:
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("bad"), visibility_timeout=30)
    with pytest.raises(ConfigError, match="cannot set"):
        q.set_attributes(partitions=4)
    with pytest.raises(ConfigError, match="visibility_timeout"):
        q.set_attributes(visibility_timeout=-1)
    with pytest.raises(ConfigError, match="at least one"):
        q.set_attributes()
    # what the host says to a client that skips those checks
    with pytest.raises(InvalidParameter, match="cannot change after a queue is created"):
        c.any_host(Command.SET_QUEUE_ATTRIBUTES, {"name": q.name, "changes": {"fifo": True}})
    with pytest.raises(InvalidParameter, match="partitions cannot be set here"):
        c.any_host(Command.SET_QUEUE_ATTRIBUTES, {"name": q.name, "changes": {"partitions": 2}})
    with pytest.raises(InvalidParameter, match="unknown queue settings"):
        c.any_host(Command.SET_QUEUE_ATTRIBUTES, {"name": q.name, "changes": {"colour": "red"}})
    with pytest.raises(InvalidParameter, match="max_receive_count"):
        c.any_host(Command.SET_QUEUE_ATTRIBUTES, {"name": q.name, "changes": {"max_receive_count": 0}})
    with pytest.raises(zmqueue.QueueNotFound):
        c.any_host(Command.SET_QUEUE_ATTRIBUTES, {"name": qcluster.queue_name("none"),
                                                   "changes": {"delay_s": 1}})
    assert c.get_queue(q.name).config.visibility_timeout_s == 30


def test_the_cli_sets_settings(qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("cli"))
    addr = qcluster.factory.agent.http_addr
    assert cli(["queue", "set", q.name, "--delay", "2", "--max-messages", "500", "--consul", addr]) == 0
    assert "delay=2" in capsys.readouterr().out
    # read back from the hosts' metadata caches, which follow Consul a moment behind
    wait_for(lambda: (g := c.get_queue(q.name).config) and (g.delay_s, g.max_messages) == (2, 500), 10,
             "delay 2 and max_messages 500 served")
    assert cli(["queue", "set", q.name, "--max-messages", "0", "--consul", addr]) == 0
    wait_for(lambda: c.get_queue(q.name).config.max_messages is None, 10, "max_messages unset served")
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # (a usage error, as argparse's: exit 2, on stderr)
        cli(["queue", "set", q.name, "--consul", addr])
    assert info.value.code == 2
    assert capsys.readouterr() == ("", "zmqueue queue set: error: nothing to change: give at least one "
                                       "setting (see `zmqueue queue set --help`)\n")


def test_the_cli_shows_a_queue_as_it_is_served(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("show"), partitions=2, visibility_timeout=45)
    addr = qcluster.factory.agent.http_addr
    q.send(b"routes are known once a send went through")
    capsys.readouterr()
    assert cli(["queue", "show", q.name, "--consul", addr]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["config"]["visibility_timeout_s"] == 45
    assert [p["partition"] for p in shown["partitions"]] == [0, 1]
    for p in shown["partitions"]:
        assert p["replicas"], p
        assert set(p["endpoints"]) <= set(p["replicas"]), p
        assert p["down"] == [], p  # every host of the module's cluster is up
    assert cli(["queue", "show", qcluster.queue_name("missing"), "--consul", addr]) == 1
    assert "does not exist" in capsys.readouterr().err
