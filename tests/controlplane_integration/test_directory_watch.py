"""The metadata watch's blocking query: a wait that ends with nothing changed
under the prefix keeps the parsed tree (and reads the hosts again); any change
is parsed. Real Consul, in process."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import running_agent
from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.queue_directory import QueueDirectory


def test_a_watch_that_times_out_unchanged_keeps_the_parsed_tree(tmp_path: Path) -> None:
    with running_agent(tmp_path / "consul") as agent:
        d = QueueDirectory(ConsulClient((agent.http_addr,), 5.0))
        d.client.call(lambda c: c.kv.put(kv.queue_config_key("a"),
                                          kv.encode_queue_config(QueueConfig("a"))))
        first = d.snapshot()
        assert set(first.state.configs) == {"a"}

        started = time.monotonic()
        same = d.snapshot(first.index, 1.0, first)
        assert time.monotonic() - started >= 0.9  # the query waited: nothing moved
        assert same.index == first.index and same.state is first.state
        assert same.hosts is not first.hosts  # health is not in KV: read every time

        d.client.call(lambda c: c.kv.put(kv.queue_config_key("b"),
                                          kv.encode_queue_config(QueueConfig("b"))))
        moved = d.snapshot(same.index, 5.0, same)
        assert moved.index > first.index and moved.state is not first.state
        assert set(moved.state.configs) == {"a", "b"}
