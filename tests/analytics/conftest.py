"""Fixtures for the analytics tests: one real cluster run per session with a
known workload (its logs are what Spark reads), and one local SparkSession.

The workload, and what the client saw of it (ids, enqueue times, delete time
brackets), is recorded in :class:`Workload` so the tests compare the reports
with what was sent, received and deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import QueueCluster, _wipe_consul
from zmqueue.localcluster import ConsulAgent


@dataclass
class Workload:
    data_dir: Path
    node: str
    queues: dict[str, str]  # role -> real queue name
    sent: dict[str, list[str]] = field(default_factory=dict)  # role -> message ids
    # message id -> (enqueue ms from the host, client ms before delete, client ms after delete)
    deletes: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    dlq_moved: list[str] = field(default_factory=list)


def _ms() -> float:
    return time.time() * 1000


def _delete_timed(q: Any, msgs: list[Any], wl: Workload) -> None:
    before = _ms()
    assert q.delete_batch([m.receipt for m in msgs]) == [None] * len(msgs)
    after = _ms()
    for m in msgs:
        wl.deletes[m.id] = (int(m.sent_at.timestamp() * 1000), before, after)


def _receive_n(q: Any, n: int, timeout_s: float = 10) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += q.receive(max_messages=min(10, n - len(got)), wait_time=1)
    assert len(got) == n, f"received {len(got)} of {n}"
    return got


def run_workload(qc: QueueCluster, data_dir: Path) -> Workload:
    """orders: 30 sent, 30 received, 20 deleted; retry: 4 sent, received twice, deleted;
    work: 5 sent, received once, then dead-lettered to work-dlq, where they are received and deleted."""
    c = qc.client
    names = {r: qc.queue_name(r) for r in ("orders", "retry", "work")}
    names["work-dlq"] = names["work"] + "-dlq"
    wl = Workload(data_dir, qc.factory.hosts[0].node, names)
    orders = c.create_queue(names["orders"], fsync="always")
    wl.sent["orders"] = [i for b in range(3) for i in orders.send_batch(
        [f"order-{b}-{k}".encode() * (k + 1) for k in range(10)])]
    got = _receive_n(orders, 30)
    _delete_timed(orders, got[:10], wl)
    time.sleep(0.05)
    _delete_timed(orders, got[10:20], wl)

    retry = c.create_queue(names["retry"], visibility_timeout=1, fsync="always")
    wl.sent["retry"] = retry.send_batch([b"r1", b"r2", b"r3", b"r4"])
    _receive_n(retry, 4)
    again = _receive_n(retry, 4)  # long polls return as the 1 s visibility timeouts expire
    assert {m.receive_count for m in again} == {2}
    _delete_timed(retry, again, wl)

    work = c.create_queue(names["work"], visibility_timeout=1, dead_letter_queue=names["work-dlq"],
                          max_receive_count=1, fsync="always")
    wl.sent["work"] = work.send_batch([b"w1", b"w2", b"w3", b"w4", b"w5"])
    _receive_n(work, 5)
    dlq = c.get_queue(names["work-dlq"])
    # the first receive attempts after the visibility timeout move all five to the DLQ
    deadline = time.monotonic() + 15
    while dlq.stats()["total"] < 5 and time.monotonic() < deadline:
        assert work.receive(max_messages=10, wait_time=0.5) == []
    dead = _receive_n(dlq, 5)
    assert {m.dead_letter_source for m in dead} == {names["work"]}
    wl.dlq_moved = [m.id for m in dead]
    _delete_timed(dlq, dead, wl)
    return wl


@pytest.fixture(scope="session")
def workload(consul_agent: ConsulAgent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workload]:
    """One real host, the known workload, then the host stopped (segments closed)."""
    base = tmp_path_factory.mktemp("analytics-cluster")
    qc = QueueCluster(consul_agent, base, 1)
    try:
        qc.start()
        wl = run_workload(qc, base / "data")
    except BaseException:
        print(qc.factory.logs())
        raise
    finally:
        qc.stop()
        _wipe_consul(consul_agent)
    yield wl


@pytest.fixture(scope="session")
def spark_starting() -> Iterator[Future[Any]]:
    """The SparkSession, started in a thread so the JVM boots while the cluster runs."""
    from analytics.session import get_session

    with ThreadPoolExecutor(1, thread_name_prefix="spark-start") as pool:
        fut = pool.submit(get_session, app_name="zmqueue-analytics-tests")
        try:
            yield fut
        finally:
            fut.result().stop()


@pytest.fixture(scope="session")
def spark(spark_starting: Future[Any], workload: Workload) -> Any:
    return spark_starting.result(timeout=120)


