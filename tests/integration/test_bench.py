"""Smoke tests of the benchmarks themselves (short and small: the real runs
are `zmqueue bench` and `python -m benchmarks.*`, never part of the suite)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import QueueCluster, wait_for
from zmqueue.bench import ceiling
from zmqueue.bench.queueops import PUSH_COUNT, measure_queue
from zmqueue.errors import ZmqueueError


def test_the_raw_pyzmq_ceiling_measures_batched_round_trips_and_single_latency() -> None:
    server = ceiling.EchoServer.start()
    try:
        batched = ceiling.dealer_router_batched(server.endpoint, 100, 100, 1, duration_s=0.3)
        single = ceiling.dealer_router_single(server.endpoint, 100, count=200, warmup=10)
    finally:
        server.stop()
    assert batched["payloads_per_s"] > 1000
    assert 0 < single["p50"] <= single["p99"] <= single["p99.9"]


def test_the_queue_benchmark_receives_and_deletes_every_message_it_sent(qcluster: QueueCluster) -> None:
    r = measure_queue(qcluster.client, 100, 50, duration_s=0.3, single_count=50)
    assert r["received"] == r["sent"] > 0
    assert r["receive_pipeline_received"] == r["sent"] and r["receive_pipeline_msgs_per_s"] > 0
    assert r["send_batch_msgs_per_s"] > 0 and r["send_single_p99_ms"] > 0
    assert r["push_handled"] == PUSH_COUNT and r["push_msgs_per_s"] > 0
    assert r["send_pipelined_msgs_per_s"] > 0


@pytest.mark.parametrize(("mode", "sending"), [("pull", ["--batch", "10"]), ("push", ["--batch", "10"]),
                                               ("pull", ["--window", "20"]),
                                               ("pull", ["--window", "20", "--queue-type", "fifo"])])
def test_zmqueue_bench_checks_every_message_and_prints_a_json_line_per_run(
        qcluster: QueueCluster, mode: str, sending: list[str]) -> None:
    """Batches of 10, or single sends 20 in flight (a pipeline; a FIFO one too)."""
    consul = qcluster.client.consul_addresses[0]
    proc = subprocess.run(
        [sys.executable, "-m", "zmqueue", "bench", "--consul", consul, "--duration", "0.5",
         "--max-messages", "200", *sending, "--producers", "2", "--consumers", "1",
         "--consumer-mode", mode, "--no-progress"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    [line] = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert line["sent"] > 0 and line["lost"] == 0 and line["duplicates"] == 0
    assert line["unique_received"] == line["sent"] and line["errors"] == []
    assert line["send_p99_ms"] > 0 and "lost" in proc.stdout
    assert line["config"]["consumer_mode"] == mode
    if "--window" in sending:
        assert line["config"]["window"] == 20 and line["send_requests"] * 20 == line["sent"]


def test_the_peer_harness_refuses_to_start_without_the_peers_clients(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without the `bench` extra every peer run used to fail one by one; now
    the harness says what to install before it starts anything."""
    from benchmarks.peers import __main__ as peers

    monkeypatch.setitem(peers.CLIENTS, "redis", "zmqueue_no_such_client")
    assert peers.missing_clients(["zmqueue", "redis"]) == ["zmqueue_no_such_client"]
    assert peers.missing_clients(["zmqueue", "zmqueue-r3"]) == []
    with pytest.raises(SystemExit) as exc:
        peers.main(["--systems", "zmqueue,redis", "--runs", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "zmqueue_no_such_client" in err and "pip install -c ops/constraints.txt -e '.[bench]'" in err


def test_the_per_request_cpu_benchmark_reads_every_thread_of_the_servers(qcluster: QueueCluster) -> None:
    """benchmarks.percall: CPU time per request by thread, for the raw echo
    server (also pinned to one CPU, affinities restored after) and a host."""
    import os

    from benchmarks import percall

    mine = os.sched_getaffinity(0)
    raw = percall.raw_ops(200)
    assert os.sched_getaffinity(0) == mine
    assert {"raw 1", "raw 100"} <= raw.keys()
    for m in raw.values():
        assert m["wall_us"] > 0 and m["loop_us"] > 0 and m["client_us"] > 0 and m["io_us"] >= 0
    assert raw["raw 100"]["messages"] == 100 * raw["raw 100"]["requests"] == 2000
    q = qcluster.client.create_queue(qcluster.queue_name("percall"))
    pids = [h.pid for h in qcluster.factory.hosts]
    ops = percall._queue_ops(q, pids[0], 100)  # whichever host writes, the counts hold
    assert {"send 1", "send 100", "receive+delete 1", "delete_and_receive 100"} <= ops.keys()
    assert ops["receive+delete 1"]["requests"] == 200
    assert ops["delete_and_receive 100"]["messages"] == 1000
    assert q.stats()["visible"] == 0  # every message it sent was received and deleted
    assert all(m["wall_us"] > 0 for m in ops.values())
    roles = percall.thread_cpu_ns(os.getpid())
    assert roles["loop"] > 0 and set(roles) == {"loop", "io", "other"}


def test_the_per_request_cpu_benchmark_splits_a_replicated_send_between_its_hosts() -> None:
    """benchmarks.percall's R=3 row: a Consul agent and 3 hosts of its own
    (stopped by pid after); the host the client sends to and the replicas
    each spend time on every synchronous send."""
    from benchmarks import percall

    r = percall.replicated_ops(100, None)["send 1, R=3 sync"]
    assert r["requests"] == r["messages"] == 100
    assert r["wall_us"] > 0 and r["client_us"] > 0
    assert r["loop_us"] > 0 and r["replica_loop_us"] > 0 and r["replica_io_us"] > 0


def test_the_pipelined_producer_benchmark_reports_coalesced_requests(
        capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks.pipeline_producer (a Consul agent and a host of its own,
    stopped by pid): one JSON line per round; with the default pipeline the
    100 sends of each burst go in fewer than 100 requests, and with
    max_requests = window each send is its own request."""
    from benchmarks import pipeline_producer

    assert pipeline_producer.main(["--rounds", "1", "--seconds", "0.5"]) == 0
    assert pipeline_producer.main(["--rounds", "1", "--seconds", "0.5", "--max-requests", "100"]) == 0
    coalesced, alone = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert coalesced["msgs_per_s"] > 0 and coalesced["client_cpu_us_per_100"] > 0
    assert coalesced["host_loop_cpu_us_per_100"] > 0
    assert coalesced["requests_per_100"] < 100, "a burst of sends was coalesced"
    assert alone["requests_per_100"] == 100, "max_requests = window: one request per send"


def test_the_cpu_budget_benchmark_splits_a_workloads_cpu_by_process(
        capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks.cpu_budget (a Consul agent and a host of its own, stopped by
    pid): W1's CPU per message lands on the host, the producer and the
    consumer, none on replicas (R=1), and every message sent arrived."""
    from benchmarks import cpu_budget

    assert cpu_budget.main(["--workload", "W1", "--runs", "1", "--seconds", "0.6", "--warm", "0.3",
                            "--json"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["workload"] == "W1" and row["lost"] == 0 and row["duplicates"] == 0
    assert row["writer_loop"] > 0 and row["producers"] > 0 and row["consumers"] > 0
    assert row["replicas"] == 0
    assert row["total"] == pytest.approx(sum(row[c] for c in cpu_budget.COLUMNS), abs=0.01)
    assert row["msgs_per_s"] > 0 and row["busy"] > 0 and row["cpu_bound_at"] > 0


def _spawned_children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = []
    for k in kids:
        with contextlib.suppress(OSError):
            if b"multiprocessing-fork" in Path(f"/proc/{k}/cmdline").read_bytes():
                out.append(int(k))
    return out


def _bench_messages_seen(qcluster: QueueCluster) -> bool:
    """Whether a bench queue (``bench-*``) holds a message now, visible or in
    flight: its producer and consumer are in their loops."""
    for name in qcluster.client.list_queues("bench-"):
        with contextlib.suppress(ZmqueueError):  # (created meanwhile: its routes not known yet)
            st = qcluster.client.get_queue(name).stats()
            if st.get("visible", 0) + st.get("in_flight", 0) > 0:
                return True
    return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_at_a_terminal_stops_zmqueue_bench_and_its_workers_without_a_traceback(
        qcluster: QueueCluster) -> None:
    """A terminal's Ctrl-C signals the whole foreground process group: the bench
    and its producer and consumer processes. The workers printed a
    KeyboardInterrupt traceback each; the parent stops them itself."""
    consul = qcluster.client.consul_addresses[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmqueue", "bench", "--consul", consul, "--duration", "60", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(_spawned_children(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_spawned_children(proc.pid)) == 2, "the bench's producer and consumer did not start"
        wait_for(lambda: _bench_messages_seen(qcluster), 30, "messages of the bench's queue")  # (mid-run)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted; stopped every process it started" in err
    deadline = time.monotonic() + 10  # (the resource tracker ends when it sees its parent gone)
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(proc.pid)


@pytest.mark.parametrize("queue_type", ["standard", "fifo"])
def test_zmqueue_bench_sends_messages_above_the_default_queue_limit(
        qcluster: QueueCluster, queue_type: str) -> None:
    """--size takes up to 1 MiB, but the bench's queue kept the default
    max_message_bytes (256 KiB): every larger send failed (0 sent, exit 3)."""
    consul = qcluster.client.consul_addresses[0]
    proc = subprocess.run(
        [sys.executable, "-m", "zmqueue", "bench", "--consul", consul, "--duration", "0.5",
         "--max-messages", "10", "--size", str(600 * 1024), "--queue-type", queue_type, "--no-progress"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    [line] = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert line["sent"] > 0 and line["unique_received"] == line["sent"] and line["errors"] == []


@pytest.mark.parametrize(("argv", "says"), [
    (["--runs", "0"], "--runs must be 1 to 50"),
    (["--workloads", "W9"], "unknown workload 'W9'"),
    (["--duration", "0"], "duration_s=0.0: must be 0.1 to 3600"),
    (["--sizes", "abc"], "--sizes must be comma-separated message sizes in bytes"),
    (["--sizes", "10"], "message_bytes=10: must be 20 to 1 MiB"),
])
def test_the_peer_harness_refuses_bad_options_before_it_starts_anything(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str],
        says: str) -> None:
    """They were a traceback (and --runs 0 started every server for nothing,
    exit 0)."""
    from benchmarks.peers import __main__ as peers

    def no_start(*args: object) -> None:
        raise AssertionError("started")

    monkeypatch.setattr(peers, "start_all", no_start)
    with pytest.raises(SystemExit) as exc:
        peers.main(["--systems", "zmqueue", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


@pytest.mark.parametrize("module", ["benchmarks.queues", "benchmarks.ceiling", "benchmarks.many_queues",
                                    "benchmarks.parked", "benchmarks.watch_micro",
                                    "benchmarks.analytics.bench_spark"])
def test_benchmarks_refuse_runs_below_one(module: str) -> None:
    """--runs 0 was an IndexError traceback (benchmarks.queues: after starting its cluster), or ran
    nothing and reported an empty median."""
    proc = subprocess.run([sys.executable, "-m", module, "--runs", "0"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "argument --runs: must be 1 or more, got 0" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
