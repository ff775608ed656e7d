"""A host that cannot open a stream's files serves on: a stray file where a
queue's directory goes (the same goes for a disk out of inodes or the
open-file limit) used to end the host process at once, and every replica of
a new queue opens its streams at the same moment, so one shared cause ended
them all. Now that queue's requests get an error naming the file and what to
do, the host's other queues are served, and the stream opens by itself once
the file is moved. A corrupt block found when a host opens a stream is a
WARNING and a /metrics counter (it used to be an INFO line only)."""

from __future__ import annotations

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from tests.integration.test_disk_reserve import _metrics
from zmqueue.errors import Unavailable
from zmqueue.localcluster import ConsulAgent


def test_a_stray_file_where_a_queue_directory_goes_refuses_that_queue_only_until_it_is_moved(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("h1")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "the host passing")
    stray = h.data_dir / "queues" / "blocked"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text("a file where the host needs the queue's directory")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=3, retries=1) as client:
        blocked = client.create_queue("blocked")
        with pytest.raises(Unavailable) as err:
            blocked.send(b"refused")
        text = str(err.value)
        assert f"{stray} is a file where the host needs a directory" in text, text
        assert "move that file out of the data directory" in text, text
        assert h.alive(), h.log_tail()
        assert _metrics(h.data_dir)["zmqueue_streams_unopened"] == 1

        fine = client.create_queue("fine")  # the host's other queues: served
        fine.send(b"served")
        assert [m.body for m in fine.receive(max_messages=10, wait_time=5)] == [b"served"]

        stray.unlink()  # the host tries again by itself

        def takes_a_send() -> bool:
            try:
                blocked.send(b"after")
            except Unavailable:
                return False
            return True

        wait_for(takes_a_send, 20, "a send taken once the stray file was moved", interval_s=0.2)
        assert [m.body for m in blocked.receive(max_messages=10, wait_time=5)] == [b"after"]
        assert _metrics(h.data_dir)["zmqueue_streams_unopened"] == 0
    assert "a request loop pass failed" not in h.log_tail(200_000)
    hosts.check_none_died()


def test_a_corrupt_block_found_at_start_is_a_warning_and_counted(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("h1")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "the host passing")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
        q = client.create_queue("orders")  # one host: R=1, nothing repairs this copy
        for i in range(20):
            q.send_batch([b"m%d-%d" % (i, j) for j in range(10)])
    h.stop()
    [seg] = sorted((h.data_dir / "queues" / "orders" / "0" / h.node).glob("*.seg"))
    data = bytearray(seg.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    seg.write_bytes(bytes(data))

    h = hosts.restart(h)
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "the host passing again")
    def restarted_metrics() -> dict[str, float] | None:
        try:  # (until the new process has written host.json, it names the stopped one's port)
            found = _metrics(h.data_dir)
        except OSError:  # (urllib's URLError is one)
            return None
        # (exported at 0 from the start: the scan runs once the host opens the stream)
        return found if found.get("zmqueue_recovery_corrupt_blocks_total", 0) > 0 else None

    metrics = wait_for(restarted_metrics, 20, "the restarted host's recovery scan counted")
    assert metrics["zmqueue_recovery_corrupt_blocks_total"] == 1, metrics
    assert metrics["zmqueue_recovery_truncated_bytes_total"] > 0, metrics
    log = h.log_tail(200_000)
    [line] = [ln for ln in log.splitlines() if " WARNING " in ln and "the recovery scan cut" in ln]
    assert f"stream orders/0/{h.node}" in line and seg.name in line and "(R=1)" in line, line
    hosts.check_none_died()
