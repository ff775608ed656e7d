"""The counting jobs' view of several replicas (``one_replica``), on logs the
storage engine writes as two replicas of one stream hold it after a writer
was killed (kill -9) and another took over (cf. a real cluster's logs).

The old writer ``w-old`` wrote 40 messages in term 1 (replicated) and six
more no other replica got before it died: a diverged tail, which its copy
cuts when it rejoins. ``w-new`` took over in term 2 (an EPOCH record at seq
41, starting a new segment file), received and deleted one message, purged
the rest, and compaction then removed its file of term 1. So seqs 1..40 are
only in ``w-old``'s copy, 41..44 only in ``w-new``'s; ``w-old``'s 41..46 are
not part of the stream.

(``one_replica`` kept the whole stream from the one copy with the highest
seq, ``w-old``'s, or from ``w-new``'s when its seq was the higher: either
way the other's records went uncounted.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from analytics.jobs import JOBS
from analytics.jobs.common import load_records, one_replica
from analytics.reader import read_table
from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig

pytestmark = pytest.mark.spark

T0 = 1_767_225_600_000
QUEUE, ORIGIN = "purgeme", "w-old"


def _store(base: Path, node: str) -> PartitionStore:
    host = base / node
    host.mkdir(parents=True)
    (host / "host.json").write_text(json.dumps({"node": node, "cluster": "c", "pid": 1}))
    return PartitionStore.open(host / "queues" / QUEUE / "0" / ORIGIN, StorageConfig(fsync="never"),
                               now_ms=T0)


def _messages(n: int) -> list[NewMessage]:
    return [NewMessage(uuid.uuid4().bytes, b"body-%d" % k, b"") for k in range(n)]


def write_takeover(base: Path) -> None:
    term1 = _messages(40)
    old = _store(base, "w-old")
    assert old.append(term1, T0, 1) == list(range(1, 41))
    old.commit()
    assert old.append(_messages(6), T0 + 1000, 1) == list(range(41, 47))  # never replicated
    old.commit()
    old.close()

    new = _store(base, "w-new")
    new.append(term1, T0, 1)  # (as replicated: same ids, times, term)
    new.commit()
    new.epoch = 2
    assert new.mark_epoch(T0 + 5000) == 41  # a new segment file
    [got], _ = new.receive(1, T0 + 6000, 30_000)
    assert got.seq == 1
    new.delete(got.seq, got.receive_count, T0 + 6250)
    assert new.purge(T0 + 7000) == 39
    new.commit()
    assert new.compact(now_ms=T0 + 8000) == 1  # the term-1 file: nothing live in it
    new.close()
    seg_dir = base / "w-new" / "queues" / QUEUE / "0" / ORIGIN
    assert [p.name for p in sorted(seg_dir.glob("*.seg"))] == ["00000000000000000041.seg"]


@pytest.fixture(scope="module")
def takeover(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("takeover")
    write_takeover(base)
    return base


def test_the_logs_are_as_a_takeover_leaves_them_and_read_without_a_gap(takeover: Path) -> None:
    rows = read_table([takeover], ["host", "record_type", "seq", "epoch", "corrupt"]).to_pylist()
    held = {h: [(r["seq"], r["epoch"], r["record_type"]) for r in rows if r["host"] == h]
            for h in ("w-old", "w-new")}
    assert held["w-old"] == [(s, 1, "MESSAGE") for s in range(1, 47)]
    assert held["w-new"] == [(41, 2, "EPOCH"), (42, 2, "VISIBILITY"), (43, 2, "DELETE"), (44, 2, "PURGE")]
    # a copy whose first files were compacted is no gap (SEGMENT_FORMAT: compaction removes from the start)
    assert all(r["corrupt"] is None for r in rows)


@pytest.fixture(scope="module")
def spark_only(spark_starting: Future[Any]) -> Iterator[Any]:
    """The session without the cluster run the other Spark tests need."""
    yield spark_starting.result(timeout=120)


def test_each_seq_counts_once_from_whichever_replica_holds_it(spark_only: Any, takeover: Path) -> None:
    view = one_replica(load_records(spark_only, [str(takeover)]))
    got = sorted((r["seq"], r["epoch"], r["host"]) for r in view.select("seq", "epoch", "host").collect())
    assert got == [(s, 1, "w-old") for s in range(1, 41)] + [(s, 2, "w-new") for s in range(41, 45)]

    [d] = JOBS["deliveries"][0](view).collect()
    counts = (d["queue"], d["sent"], d["received_messages"], d["receives"], d["deleted"])
    assert counts == (QUEUE, 40, 1, 1, 1)
    t = JOBS["throughput"][0](view).collect()
    assert sum(r["sent"] for r in t) == 40 and sum(r["deleted"] for r in t) == 1
    # the message from one copy, its delete from the other: still one latency
    [lat] = JOBS["latency"][0](view).collect()
    assert (lat["deleted"], lat["max_ms"]) == (1, 6250.0)
    # everything purged by the end: nothing left in the queue
    assert JOBS["depth"][0](view).collect()[-1]["depth"] == 0
