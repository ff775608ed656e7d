"""Spark over the logs of a real cluster run with a known workload (see conftest).

One test function on purpose: the suite runs under pytest-xdist, and every
worker that picks up a Spark test pays for a SparkSession and a cluster run.
Each check is a helper named for what it proves.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analytics.jobs import JOBS
from analytics.jobs.common import load_records, one_replica
from analytics.segments import HEADER_BYTES, iter_blocks
from tests.analytics.conftest import Workload

pytestmark = pytest.mark.spark


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def by_queue(wl: Workload, table: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    role = {v: k for k, v in wl.queues.items()}
    return {role[r["queue"]]: r for r in table if r["queue"] in role}


def check_deliveries(wl: Workload, df: Any) -> None:
    d = by_queue(wl, rows(JOBS["deliveries"][0](df)))
    # sent, received_messages, receives, redeliveries, max_receive_count, deleted, dlq_moves, dlq_arrivals
    want = {
        "orders": (30, 30, 30, 0, 1, 20, 0, 0),
        "retry": (4, 4, 8, 4, 2, 4, 0, 0),
        "work": (5, 5, 5, 0, 1, 0, 5, 0),
        "work-dlq": (5, 5, 5, 0, 1, 5, 0, 5),
    }
    cols = ["sent", "received_messages", "receives", "redeliveries", "max_receive_count", "deleted",
            "dlq_moves", "dlq_arrivals"]
    assert {q: tuple(r[c] for c in cols) for q, r in d.items()} == want


def check_throughput(wl: Workload, df: Any) -> None:
    t = rows(JOBS["throughput"][0](df))
    totals: dict[str, list[int]] = {}
    role = {v: k for k, v in wl.queues.items()}
    for r in t:
        acc = totals.setdefault(role[r["queue"]], [0, 0, 0, 0])
        for i, c in enumerate(("sent", "received", "deleted", "dead_lettered")):
            acc[i] += r[c]
    assert totals == {"orders": [30, 30, 20, 0], "retry": [4, 8, 4, 0], "work": [5, 5, 0, 5],
                      "work-dlq": [5, 5, 5, 0]}


def check_latency(wl: Workload, df: Any) -> None:
    from analytics.jobs.latency import message_latencies

    per = {r["message_id"]: r for r in rows(message_latencies(df))}
    assert len(per) == len(wl.deletes) == 29
    for mid, (sent_ms, before, after) in wl.deletes.items():
        r = per[mid.replace("-", "")] if mid.replace("-", "") in per else per[mid]
        assert int(r["sent"].timestamp() * 1000) == sent_ms
        # the host logged the delete between the client's call and its reply (same clock, ms resolution)
        assert before - 1 <= sent_ms + r["latency_ms"] <= after + 1
    lat = by_queue(wl, rows(JOBS["latency"][0](df)))
    for q in ("orders", "retry", "work-dlq"):
        values = [r["latency_ms"] for r in per.values() if r["queue"] == wl.queues[q]]
        assert lat[q]["deleted"] == len(values)
        for p in (50, 90, 99):
            assert lat[q][f"p{p}_ms"] == pytest.approx(float(np.percentile(values, p)), abs=1e-6)
        assert lat[q]["max_ms"] == max(values)


def check_dlq_moves(wl: Workload, df: Any) -> None:
    moves = rows(JOBS["dlq-moves"][0](df))
    assert sorted(m["message_id"] for m in moves) == sorted(i.replace("-", "") for i in wl.dlq_moved)
    assert {(m["source_queue"], m["dlq"], m["receive_count"]) for m in moves} == {
        (wl.queues["work"], wl.queues["work-dlq"], 1)}


def check_depth_clients_replication(wl: Workload, df: Any) -> None:
    depth = rows(JOBS["depth"][0](df))
    last = {}
    for r in depth:
        last[r["queue"]] = r
    assert {q: last[wl.queues[q]]["depth"] for q in ("orders", "retry", "work", "work-dlq")} == {
        "orders": 10, "retry": 0, "work": 0, "work-dlq": 0}
    assert last[wl.queues["orders"]]["oldest_age_s"] > 0
    clients = rows(JOBS["clients"][0](df))
    prod = {r["queue"]: r["messages"] for r in clients if r["role"] == "producer"}
    assert {r["client"] for r in clients} == {"anonymous"} and prod[wl.queues["orders"]] == 30
    rep = rows(JOBS["replication"][0](df))
    assert {(r["replicas"], r["lag_records"], r["lag_ms"]) for r in rep} == {(1, 0, 0.0)}


def check_filtered_then_unfiltered_counts(df: Any) -> None:
    total = df.count()
    assert df.where("record_type = 'MESSAGE'").count() == 44
    assert df.count() == total  # no filter leaks into a later query (no pushFilters)


def corrupt_copy(wl: Workload, dest: Path) -> tuple[Path, int]:
    """A copy of the logs with one flipped payload byte and one truncated tail."""
    shutil.copytree(wl.data_dir, dest)
    segs = sorted((dest).rglob("*.seg"), key=lambda p: p.stat().st_size, reverse=True)
    offsets = [b.header.offset for b in iter_blocks(segs[0])]  # type: ignore[union-attr]
    with open(segs[0], "r+b") as f:
        f.seek(offsets[1] + HEADER_BYTES)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    os.truncate(segs[1], segs[1].stat().st_size - 5)
    return dest, 2


def check_corrupt_and_truncated(spark: Any, wl: Workload, tmp: Path) -> None:
    dest, n_bad = corrupt_copy(wl, tmp / "corrupt")
    df = load_records(spark, [str(dest)]).cache()
    bad = rows(JOBS["corruption"][0](df))
    assert len(bad) == n_bad
    assert {r["reason"].split(":")[0] for r in bad} == {"payload checksum mismatch", "truncated payload"}
    d = JOBS["deliveries"][0](df).collect()  # the job completes on what is readable
    assert sum(r["sent"] for r in d) < 49
    df.unpersist()


def check_two_replicas(spark: Any, wl: Workload, tmp: Path) -> None:
    """A lagging copy of the host as a second replica: lag reported, counts not doubled."""
    dest = tmp / "replicas"
    [host] = [p for p in wl.data_dir.iterdir() if p.is_dir()]
    shutil.copytree(host, dest / "a")
    shutil.copytree(host, dest / "b")
    (dest / "b" / "host.json").write_text('{"node": "replica-b"}')
    seg = max((dest / "b").rglob("*.seg"), key=lambda p: p.stat().st_size)
    last = [b.header for b in iter_blocks(seg)][-1]  # type: ignore[union-attr]
    os.truncate(seg, last.offset)
    df = load_records(spark, [str(dest)])
    rep = [r for r in rows(JOBS["replication"][0](df)) if r["lag_records"] > 0]
    assert [(r["host"], r["lag_records"]) for r in rep] == [("replica-b", last.record_count)]
    d = by_queue(wl, rows(JOBS["deliveries"][0](one_replica(df))))
    assert d["orders"]["sent"] == 30 and d["retry"]["receives"] == 8


def check_report_and_cli(wl: Workload, tmp: Path) -> None:
    from zmqueue.cli.main import main

    out = tmp / "report"
    assert main(["analytics", "report", "--data", str(wl.data_dir), "--out", str(out), "--no-progress"]) == 0
    html = (out / "index.html").read_text()
    assert "zmqueue analytics report" in html and "data:image/png;base64," in html
    assert {p.name for p in (out / "charts").iterdir()} == {"throughput.png", "latency.png",
                                                             "deliveries.png", "depth.png"}
    assert {p.name for p in (out / "tables").iterdir()} == {f"{j}.parquet" for j in JOBS}
    assert main(["analytics", "deliveries", "--data", str(wl.data_dir), "--queues", wl.queues["retry"]]) == 0


def test_spark_reports_match_what_was_sent_received_and_deleted(spark: Any, workload: Workload,
                                                                tmp_path: Path) -> None:
    df = load_records(spark, [str(workload.data_dir)]).cache()
    assert df.where("corrupt IS NOT NULL").count() == 0
    check_filtered_then_unfiltered_counts(df)
    check_deliveries(workload, df)
    check_throughput(workload, df)
    check_latency(workload, df)
    check_dlq_moves(workload, df)
    check_depth_clients_replication(workload, df)
    df.unpersist()
    check_corrupt_and_truncated(spark, workload, tmp_path)
    check_two_replicas(spark, workload, tmp_path)
    check_report_and_cli(workload, tmp_path)
