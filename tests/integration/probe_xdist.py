"""Run by test_xdist_isolation.py with ``pytest -n 2``: both workers register
the SAME node name at the same time; each must see only its own host."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq

from tests.conftest import wait_for
from tests.helpers import service_entry
from zmqueue.client.transport import call
from zmqueue.localcluster import ConsulAgent, HostProcess
from zmqueue.protocol import Command


@pytest.mark.parametrize("worker_case", ["a", "b"])
def test_same_node_name_on_two_workers(
        worker_case: str, consul_agent: ConsulAgent, tmp_path: Path) -> None:
    h = HostProcess("shared", "same-node", tmp_path / "d", consul_agent.http_addr, tmp_path)
    h.start()
    ctx = zmq.Context()
    try:
        entry = wait_for(lambda: service_entry(consul_agent, "same-node"), 15, "registration")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # hold the registration while the other worker runs
            entry = service_entry(consul_agent, "same-node")
            assert entry is not None
            status = call(ctx, entry["Service"]["Meta"]["client_endpoint"], Command.STATUS)
            assert status["pid"] == h.pid, "another worker's host answered: agents collided"
            time.sleep(0.2)
    finally:
        ctx.term()
        h.stop()
