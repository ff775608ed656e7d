"""Spark over the logs of a real cluster run with a known workload (see conftest).

One test function on purpose: the suite runs under pytest-xdist, and every
worker that picks up a Spark test pays for a SparkSession and a cluster run.
It runs ``zmqueue analytics report`` once over three replicas of the host's
logs (the original; a copy lagging one block; a copy with a corrupt block and
a torn tail) and checks the report's tables: counts exact (each record once,
from whichever replica holds it), latencies within the client's timing of each
delete, corruption and lag reported. Each check is a helper named for what it
proves.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from analytics.jobs import JOBS
from analytics.jobs.common import load_records
from analytics.segments import HEADER_BYTES, iter_blocks
from tests.analytics.conftest import Workload
from zmqueue.cli.main import main

pytestmark = pytest.mark.spark


def table(out: Path, job: str) -> Any:
    """A report table as a pandas DataFrame."""
    return pq.read_table(out / "tables" / f"{job}.parquet").to_pandas()


def by_queue(wl: Workload, pdf: Any) -> dict[str, dict[str, Any]]:
    role = {v: k for k, v in wl.queues.items()}
    return {role[r["queue"]]: r for r in pdf.to_dict("records") if r["queue"] in role}


def check_deliveries(wl: Workload, out: Path) -> None:
    d = by_queue(wl, table(out, "deliveries"))
    # sent, received_messages, receives, redeliveries, max_receive_count, deleted, dlq_moves, dlq_arrivals
    want = {
        "orders": (30, 30, 30, 0, 1, 20, 0, 0),
        "retry": (4, 4, 8, 4, 2, 4, 0, 0),
        "work": (5, 5, 5, 0, 1, 0, 5, 0),
        "work-dlq": (5, 5, 5, 0, 1, 5, 0, 5),
    }
    cols = ["sent", "received_messages", "receives", "redeliveries", "max_receive_count", "deleted",
            "dlq_moves", "dlq_arrivals"]
    assert {q: tuple(int(r[c]) for c in cols) for q, r in d.items()} == want


def check_throughput(wl: Workload, out: Path) -> None:
    t = table(out, "throughput").groupby("queue")[["sent", "received", "deleted", "dead_lettered"]].sum()
    got = {role: [int(v) for v in t.loc[name]] for role, name in wl.queues.items()}
    assert got == {"orders": [30, 30, 20, 0], "retry": [4, 8, 4, 0], "work": [5, 5, 0, 5],
                   "work-dlq": [5, 5, 5, 0]}


def check_latency(wl: Workload, out: Path) -> None:
    """Each logged delete happened between the client's call and its reply (same clock, 1 ms
    resolution), so every percentile lies between those of the brackets' two ends."""
    lat = by_queue(wl, table(out, "latency"))
    msgs = {"orders": wl.sent["orders"], "retry": wl.sent["retry"], "work-dlq": wl.dlq_moved}
    for q, ids in msgs.items():
        lo = [wl.deletes[i][1] - wl.deletes[i][0] - 1 for i in ids if i in wl.deletes]
        hi = [wl.deletes[i][2] - wl.deletes[i][0] + 1 for i in ids if i in wl.deletes]
        assert lat[q]["deleted"] == len(lo) == {"orders": 20, "retry": 4, "work-dlq": 5}[q]
        for p in (50, 90, 99):
            assert np.percentile(lo, p) <= lat[q][f"p{p}_ms"] <= np.percentile(hi, p)
        assert max(lo) <= lat[q]["max_ms"] <= max(hi)


def check_dlq_moves(wl: Workload, out: Path) -> None:
    moves = table(out, "dlq-moves")
    assert sorted(moves["message_id"]) == sorted(wl.dlq_moved)
    assert set(zip(moves["source_queue"], moves["dlq"], moves["receive_count"], strict=True)) == {
        (wl.queues["work"], wl.queues["work-dlq"], 1)}


def check_depth_and_clients(wl: Workload, out: Path) -> None:
    depth = table(out, "depth").sort_values("minute").groupby("queue").last()
    assert {q: int(depth.loc[wl.queues[q], "depth"]) for q in ("orders", "retry", "work", "work-dlq")} == {
        "orders": 10, "retry": 0, "work": 0, "work-dlq": 0}
    assert depth.loc[wl.queues["orders"], "oldest_age_s"] > 0
    clients = table(out, "clients")
    assert set(clients["client"]) == {"anonymous"}
    prod = clients[clients["role"] == "producer"].set_index("queue")["messages"]
    assert int(prod[wl.queues["orders"]]) == 30


def check_replication_and_corruption(wl: Workload, out: Path, lag_b: int) -> None:
    rep = table(out, "replication")
    assert set(rep["replicas"]) == {3}
    lagging = rep[rep["lag_records"] > 0]
    assert ("replica-b", lag_b) in set(zip(lagging["host"], lagging["lag_records"], strict=True))
    assert set(rep[rep["host"] == wl.node]["lag_records"]) == {0}
    bad = table(out, "corruption")
    assert set(bad["host"]) == {"0-replica-c"}
    assert sorted(r.split(":")[0] for r in bad["reason"]) == ["payload checksum mismatch",
                                                               "truncated payload"]


def make_replicas(wl: Workload, dest: Path) -> int:
    """dest/a: the host's logs; dest/b: a copy lagging one block on the largest stream;
    dest/c: a copy with a flipped payload byte and a torn tail. Returns b's lag in records."""
    [host] = [p for p in wl.data_dir.iterdir() if p.is_dir()]
    for name in ("a", "b", "c"):
        shutil.copytree(host, dest / name)
    (dest / "b" / "host.json").write_text('{"node": "replica-b"}')
    # (named to sort first: a tie on the highest seq went to it by name, corrupt block and all)
    (dest / "c" / "host.json").write_text('{"node": "0-replica-c"}')
    seg_b = max((dest / "b").rglob("*.seg"), key=lambda p: p.stat().st_size)
    last = [b.header for b in iter_blocks(seg_b)][-1]  # type: ignore[union-attr]
    os.truncate(seg_b, last.offset)
    segs = sorted((dest / "c").rglob("*.seg"), key=lambda p: p.stat().st_size, reverse=True)
    offsets = [b.header.offset for b in iter_blocks(segs[0])]  # type: ignore[union-attr]
    with open(segs[0], "r+b") as f:
        f.seek(offsets[1] + HEADER_BYTES)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.truncate(segs[1], segs[1].stat().st_size - 5)
    return last.record_count


def check_filtered_then_unfiltered_counts(spark: Any, wl: Workload) -> None:
    df = load_records(spark, [str(wl.data_dir)], ["record_type", "corrupt"])
    total = df.count()
    assert df.where("record_type = 'MESSAGE'").count() == 44
    assert df.count() == total  # no filter leaks into a later query (pushFilters is not used)
    assert df.where("corrupt IS NOT NULL").count() == 0


def check_partitions_and_nullability(spark: Any, wl: Workload) -> None:
    df = load_records(spark, [str(wl.data_dir)], ["queue", "seq", "time"])
    assert [f.nullable for f in df.schema.fields] == [False, True, True]
    want = sorted(df.collect())
    for k, v in (("minPartitions", "3"), ("splitBytes", str(1 << 20))):  # equal cuts; one per file
        read = spark.read.format("zmqueue").schema("queue STRING, seq BIGINT, time TIMESTAMP").option(k, v)
        assert sorted(read.load(str(wl.data_dir)).collect()) == want
    with pytest.raises(Exception, match="can be null"):
        spark.read.format("zmqueue").schema("queue STRING, time TIMESTAMP NOT NULL").load(
            str(wl.data_dir)).count()


def check_bad_schemas_and_options_fail_on_the_driver_naming_them(spark: Any, wl: Workload) -> None:
    """(A column of the wrong type, or a bad option value, failed in a Python
    worker with Spark's traceback: "Expected: seq: string, Found: seq: int64",
    "invalid literal for int()", "Invalid isoformat string".)"""
    path = str(wl.data_dir)
    with pytest.raises(Exception, match="column 'seq' is BIGINT, not STRING"):
        spark.read.format("zmqueue").schema("queue STRING, seq STRING").load(path).count()
    for option, value, says in (("since", "yesterday", "option since 'yesterday' is not a time"),
                                ("splitBytes", "abc", "option splitBytes 'abc' is not a whole number"),
                                ("payload", "yes", "option payload 'yes' must be true or false"),
                                ("keyDir", "/nonexistent-keys", "no such key directory")):
        with pytest.raises(Exception, match=says):
            spark.read.format("zmqueue").schema("queue STRING").option(option, value).load(path).count()


def check_sealed_dead_letters_are_matched_by_id(spark: Any) -> None:
    """A dead letter sealed at rest, read without keyDir, has no dlq_source: the jobs
    take it from the DLQ_MOVE naming its id in another queue, the latest such move when
    a DLQ's own dead letter moved on (they counted no arrival). A redriven message gets a
    new id and is no arrival."""
    from datetime import datetime, timedelta

    from analytics.jobs.deliveries import deliveries, dlq_moves

    t0 = datetime(2026, 1, 1)

    def rec(queue: str, rtype: str, mid: str, s: int, src: str | None = None) -> tuple[Any, ...]:
        return (queue, 0, "", rtype, s, mid, t0 + timedelta(seconds=s), 1, src, None)

    rows = [rec("s", "MESSAGE", "m1", 0), rec("s", "DLQ_MOVE", "m1", 1),
            rec("a", "MESSAGE", "m1", 2), rec("a", "DLQ_MOVE", "m1", 3),   # sealed: no src
            rec("b", "MESSAGE", "m1", 4),                                  # a's DLQ, sealed
            rec("s", "MESSAGE", "m2", 5), rec("s", "DLQ_MOVE", "m2", 6),
            rec("p", "MESSAGE", "m2", 7, src="s"),                         # a plaintext DLQ
            rec("s", "MESSAGE", "m3", 8)]                                   # a redriven copy
    df = spark.createDataFrame(rows, "queue STRING, partition INT, origin STRING, record_type STRING, "
                                     "target_seq BIGINT, message_id STRING, time TIMESTAMP, "
                                     "receive_count INT, dlq_source STRING, corrupt STRING")
    got = {r["queue"]: (r["sent"], r["dlq_moves"], r["dlq_arrivals"])
           for r in deliveries(df).collect()}
    assert got == {"s": (3, 2, 0), "a": (1, 1, 1), "b": (1, 0, 1), "p": (1, 0, 1)}
    moves = {(r["source_queue"], r["message_id"], r["dlq"]) for r in dlq_moves(df).collect()}
    assert moves == {("s", "m1", "a"), ("a", "m1", "b"), ("s", "m2", "p")}


def test_spark_reports_match_what_was_sent_received_and_deleted(spark: Any, workload: Workload,
                                                                tmp_path: Path) -> None:
    check_filtered_then_unfiltered_counts(spark, workload)
    check_partitions_and_nullability(spark, workload)
    check_bad_schemas_and_options_fail_on_the_driver_naming_them(spark, workload)
    check_sealed_dead_letters_are_matched_by_id(spark)
    lag_b = make_replicas(workload, tmp_path / "data")
    out = tmp_path / "report"
    assert main(["analytics", "report", "--data", str(tmp_path / "data"), "--out", str(out),
                 "--no-progress"]) == 0
    html = (out / "index.html").read_text()
    assert "data:image/png;base64," in html and "corrupt or truncated block" in html
    assert {p.name for p in (out / "charts").iterdir()} == {"throughput.png", "latency.png",
                                                             "deliveries.png", "depth.png"}
    assert {p.name for p in (out / "tables").iterdir()} == {f"{j}.parquet" for j in JOBS}
    check_deliveries(workload, out)
    check_throughput(workload, out)
    check_latency(workload, out)
    check_dlq_moves(workload, out)
    check_depth_and_clients(workload, out)
    check_replication_and_corruption(workload, out, lag_b)
