"""Per-minute throughput aggregation: the zmqueue data source vs the same records as Parquet.

    python -m benchmarks.analytics.bench_spark [--records 10000000] [--runs 3] [--out docs/perf/analytics.md]

Generates the log with the storage engine (fsync never) in a temporary
directory, converts the records the aggregation reads to Parquet once, then
times ``messages_per_minute`` (MESSAGE records per queue per minute) on both,
alternating, and reports medians. Bounded: refuses to start a run past
``--budget-s`` seconds of total time.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.analytics.generate import dir_bytes, generate

COLUMNS = ["queue", "time"]
OPTIONS = {"types": "MESSAGE"}  # filters are data source options (no pushdown), see docs/ANALYTICS.md


def _timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[:1]
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {' '.join(java)}"


def run(records: int, runs: int, budget_s: float, work: Path) -> dict[str, Any]:
    import pyspark

    from analytics.jobs.common import load_records
    from analytics.jobs.throughput import messages_per_minute
    from analytics.session import get_session

    t_start = time.perf_counter()
    gen_s, n = _timed(lambda: generate(work / "data" / "bench-host", records))
    spark = get_session()
    src = load_records(spark, [str(work / "data")], COLUMNS, **OPTIONS)
    total = src.count()
    pq = str(work / "records.parquet")
    conv_s, _ = _timed(lambda: src.write.mode("overwrite").parquet(pq))
    par = spark.read.parquet(pq)
    assert par.count() == total
    expect = sorted(messages_per_minute(src).collect())
    assert sorted(messages_per_minute(par).collect()) == expect, "Parquet and source disagree"
    times: dict[str, list[float]] = {"source": [], "parquet": []}
    for _ in range(runs):
        if time.perf_counter() - t_start > budget_s:
            break
        for name, df in (("source", src), ("parquet", par)):
            s, _ = _timed(lambda df=df: messages_per_minute(df).collect())
            times[name].append(s)
    spark.stop()
    from analytics.reader import iter_batches

    py_s, py_n = _timed(lambda: sum(b.num_rows for b in iter_batches(
        [str(work / "data")], COLUMNS, **OPTIONS)))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"records": total, "load": os.getloadavg(), "messages": n, "generate_s": gen_s,
            "convert_s": conv_s, "times": times, "python_rate": py_n / py_s,
            "median": med, "rate": {k: total / v for k, v in med.items()},
            "log_bytes": dir_bytes(work / "data"), "parquet_bytes": dir_bytes(Path(pq)),
            "minutes": len(expect), "pyspark": pyspark.__version__, "machine": _machine(),
            "wall_s": time.perf_counter() - t_start}


def render(r: dict[str, Any], command: str) -> str:
    ratio = r["rate"]["source"] / r["rate"]["parquet"]
    rows = "\n".join(
        f"| {name} | {r['median'][name]:.2f} | {r['rate'][name] / 1e6:.2f} M | "
        f"{', '.join(f'{t:.2f}' for t in r['times'][name])} |" for name in ("source", "parquet"))
    return f"""# Analytics: the zmqueue Spark data source vs Parquet

Per-minute throughput aggregation (`analytics.jobs.throughput.messages_per_minute`:
MESSAGE records per queue per minute) over **{r['records']:,} MESSAGE records**
(8 partitions of 4 queues, one host, {r['log_bytes'] / 2**20:.0f} MiB of segments; {r['minutes']}
queue-minutes in the result), read through `spark.read.format("zmqueue")` with the
columns the query uses (`.schema("queue STRING, time TIMESTAMP")`, option
`types=MESSAGE`), beside the same rows already converted to Parquet
({r['parquet_bytes'] / 2**20:.1f} MiB, conversion {r['convert_s']:.1f} s, not timed below).
Both produce identical results (checked). Medians of {len(r['times']['source'])} alternating runs,
`local[2]`, PySpark {r['pyspark']}.

| input | median s | records/s | runs (s) |
|---|---:|---:|---|
{rows}

**Data source / Parquet = {ratio:.0%}** (target ≥ 35%).

Where the time goes: the reader alone (`analytics.reader.iter_batches`, same
columns and options, one Python process, no Spark) decodes
{r['python_rate'] / 1e6:.1f} M records/s — LZ4 decompression of the 88-byte record
table is most of it. Through Spark the same batches are produced by two Python
workers and shipped to the JVM as Arrow, then turned into rows for the
aggregation; Parquet instead scans two dictionary-encoded columns
(4 queue names, a few hundred distinct minutes) with the vectorised reader.
The source's share of the CPU is larger, so it also suffers more from other
load on a shared 2-core machine.

Machine: {r['machine']}; load average at the end {r['load'][0]:.1f} / {r['load'][1]:.1f} /
{r['load'][2]:.1f} (1/5/15 min; the machine was shared with other test runs).
Generating the log took {r['generate_s']:.1f} s; the whole benchmark {r['wall_s']:.0f} s.

Rerun:

```
{command}
```
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--out", default=None, help="write the markdown report here (docs/perf/analytics.md)")
    ap.add_argument("--work", default=None, help="work directory (default: a temporary one, removed)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="zmq-bench-analytics-"))
    try:
        r = run(args.records, args.runs, args.budget_s, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    cmd = "python -m benchmarks.analytics.bench_spark --out docs/perf/analytics.md"
    text = render(r, cmd if args.records == 10_000_000 else f"{cmd} --records {args.records}")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
