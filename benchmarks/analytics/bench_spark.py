"""Per-minute throughput aggregation: the zmqueue data source vs the same records as Parquet.

    python -m benchmarks.analytics.bench_spark [--records 10000000] [--runs 9] [--out docs/perf/analytics.md]

Generates the log with the storage engine (fsync never) in a temporary
directory, converts the records the aggregation reads to Parquet once, then
times ``messages_per_minute`` (MESSAGE records per queue per minute) on both,
alternating, and reports medians. Bounded: refuses to start a run past
``--budget-s`` seconds of total time. Each run also records the CPU time of
the JVM (executor task threads apart) and of the PySpark Python workers,
from /proc (Linux; empty elsewhere).
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

from benchmarks import _args
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


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _cpu_s(stat_path: str) -> tuple[str, float]:
    text = Path(stat_path).read_text()
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot() -> dict[str, float]:
    """CPU seconds so far: ``jvm tasks`` (executor task threads), ``jvm other``
    (codegen/JIT, GC, scheduler...), ``python workers`` (forked PySpark workers)."""
    out = {"jvm tasks": 0.0, "jvm other": 0.0, "python workers": 0.0}
    if not Path("/proc/self/stat").exists():
        return out
    for pid in _descendants(os.getpid()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if cmd.split(" ")[0].endswith("java"):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    name, t = _cpu_s(f"/proc/{pid}/task/{tid}/stat")
                    out["jvm tasks" if name.startswith("Executor task") else "jvm other"] += t
            elif "pyspark.daemon" in cmd and "pyspark.worker" in cmd:
                out["python workers"] += _cpu_s(f"/proc/{pid}/stat")[1]
        except (OSError, ValueError):
            continue  # the process or thread ended meanwhile
    return out


def run(records: int, runs: int, budget_s: float, work: Path) -> dict[str, Any]:
    import pyspark

    from analytics.jobs.common import load_records
    from analytics.jobs.throughput import messages_per_minute
    from analytics.schema import SQL_TYPES
    from analytics.session import get_session

    t_start = time.perf_counter()
    load_start = os.getloadavg()
    gen_s, n = _timed(lambda: generate(work / "data" / "bench-host", records))
    spark = get_session()
    src = load_records(spark, [str(work / "data")], COLUMNS, **OPTIONS)
    total = src.count()
    pq = str(work / "records.parquet")
    # the Parquet files as before the source's NOT NULL keys and equal partitions: one file per
    # segment file, nullable columns (measured: the same speed as 4 files or a required column)
    plain = (spark.read.format("zmqueue").schema(", ".join(f"{c} {SQL_TYPES[c]}" for c in COLUMNS))
             .options(**OPTIONS).load(str(work / "data")))
    conv_s, _ = _timed(lambda: plain.write.mode("overwrite").parquet(pq))
    par = spark.read.parquet(pq)
    assert par.count() == total
    tasks = {"source": src.rdd.getNumPartitions(), "parquet": par.rdd.getNumPartitions()}
    expect = sorted(messages_per_minute(src).collect())
    assert sorted(messages_per_minute(par).collect()) == expect, "Parquet and source disagree"
    times: dict[str, list[float]] = {"source": [], "parquet": []}
    cpu: dict[str, list[dict[str, float]]] = {"source": [], "parquet": []}
    for _ in range(runs):
        if time.perf_counter() - t_start > budget_s:
            break
        for name, df in (("source", src), ("parquet", par)):
            before = cpu_snapshot()
            s, _ = _timed(lambda df=df: messages_per_minute(df).collect())
            after = cpu_snapshot()
            times[name].append(s)
            cpu[name].append({k: after[k] - before[k] for k in after})
    spark.stop()
    from analytics.reader import iter_batches

    py_s, py_n = _timed(lambda: sum(b.num_rows for b in iter_batches(
        [str(work / "data")], COLUMNS, **OPTIONS)))
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_med = {name: {k: statistics.median(c[k] for c in runs_) for k in runs_[0]}
               for name, runs_ in cpu.items() if runs_}
    return {"records": total, "load": os.getloadavg(), "load_start": load_start, "cpu": cpu_med,
            "messages": n, "generate_s": gen_s,
            "convert_s": conv_s, "times": times, "python_rate": py_n / py_s,
            "median": med, "rate": {k: total / v for k, v in med.items()},
            "log_bytes": dir_bytes(work / "data"), "parquet_bytes": dir_bytes(Path(pq)),
            "minutes": len(expect), "tasks": tasks, "pyspark": pyspark.__version__, "machine": _machine(),
            "wall_s": time.perf_counter() - t_start}


def render(r: dict[str, Any], command: str) -> str:
    ratio = r["rate"]["source"] / r["rate"]["parquet"]
    best = {k: min(v) for k, v in r["times"].items()}
    cpu = {k: sum(c.values()) for k, c in r["cpu"].items()}
    rows = "\n".join(
        f"| {name} | {r['median'][name]:.2f} | {r['rate'][name] / 1e6:.2f} M | "
        f"{', '.join(f'{t:.2f}' for t in r['times'][name])} |" for name in ("source", "parquet"))
    cpu_rows = "\n".join(
        f"| {name} | {c['jvm tasks']:.2f} | {c['jvm other']:.2f} | {c['python workers']:.2f} | "
        f"{sum(c.values()):.2f} |" for name, c in r["cpu"].items())
    return f"""# Analytics: the zmqueue Spark data source vs Parquet

Per-minute throughput aggregation (`analytics.jobs.throughput.messages_per_minute`:
MESSAGE records per queue per minute) over **{r['records']:,} MESSAGE records**
(8 queue partitions of 4 queues, one host, {r['log_bytes'] / 2**20:.0f} MiB of segments; {r['minutes']}
queue-minutes in the result), read through `spark.read.format("zmqueue")` as the
jobs read it (`analytics.jobs.common.load_records`: the columns the query uses,
`queue STRING NOT NULL, time TIMESTAMP`, option `types=MESSAGE`, and
`minPartitions` = the session's parallelism: {r['tasks']['source']} equal partitions), beside the same
rows already converted to Parquet ({r['parquet_bytes'] / 2**20:.1f} MiB, conversion {r['convert_s']:.1f} s,
not timed below; written as before this source declared `NOT NULL` and cut equal
partitions: one file per segment file, nullable columns; read in {r['tasks']['parquet']} partitions,
Spark's packing of small files).
Both produce identical results (checked). Medians of {len(r['times']['source'])} alternating runs,
`local[2]`, PySpark {r['pyspark']}, the same session for both.

| input | median s | records/s | runs (s) |
|---|---:|---:|---|
{rows}

**Data source / Parquet = {ratio:.0%}** (medians; fastest runs
{best['parquet']:.2f} / {best['source']:.2f} s = {best['parquet'] / best['source']:.0%}; CPU per query
{cpu['parquet']:.2f} / {cpu['source']:.2f} s = {cpu['parquet'] / cpu['source']:.0%}).
Target ≥ 35%; issue #8 started at 22% (1.65 M vs 7.57 M records/s), before
blocks were decompressed into pooled buffers, numeric columns built without
`pa.array`, the worker's heap frozen, never-null columns declared `NOT NULL`
and the log cut into equal partitions (docs/ANALYTICS.md).

Where the time goes. CPU seconds per query (medians, from /proc; the
machine's other load is not in them):

| input | JVM task threads | JVM other (JIT, codegen, GC, scheduler) | Python workers | total |
|---|---:|---:|---:|---:|
{cpu_rows}

- **Python workers**: the reader alone (`analytics.reader.iter_batches`,
  same columns and options, one process, no Spark) decodes
  {r['python_rate'] / 1e6:.1f} M records/s: LZ4 decompression of the blocks
  (record table + heap, ~1 GB per run) is about half, then the
  checksum/seq/heap-bound checks and the two columns; in the workers, writing
  the batches to the JVM as Arrow IPC (~20 bytes a row) and the worker's loop
  add about a third to that.
- **JVM task threads**: PySpark {r['pyspark']}'s Python data sources are
  row-based (`PythonScan` reports columnar support UNSUPPORTED), so every
  Arrow row is copied into an `UnsafeRow` (over a quarter of the task
  threads' samples in a JFR profile), the scan updates its custom metrics
  every 100 rows (DSv2's `CustomMetrics.NUM_ROWS_PER_UPDATE`, a constant; each
  update rebuilds the Python runner's metric map: about a tenth), and the hash
  aggregate then reads strings out of those rows (about 35%). Parquet's
  vectorised scan skips the first two and hands the aggregate
  dictionary-decoded columns. None of this depends on how the source builds
  its batches (4 Ki to 256 Ki rows a batch, Arrow's bounds and null checks
  off, `time` declared `NOT NULL`: all within the noise); `queue` declared
  `NOT NULL` saved 2-4%.
- **Tasks**: each task over the Python data source costs tens of ms of CPU
  (executor, Python worker and Arrow stream set-up; 293 one-MiB partitions
  cost about 8 s more CPU per query than 8), which one task per segment file
  paid 8 times here. Cutting the log into equal block ranges,
  as many as the session's parallelism or a multiple
  (`analytics.partitions`), took 8 partitions' 1.42 s / 2.40 s CPU to 1.25 s /
  2.20 s in one session; 16 partitions cost 0.3 s CPU more than 8.
- So the ratio of total CPU is about the ratio this source can reach; the
  wall-clock ratio moves around it with the machine's other load.

Machine: {r['machine']}; load average (1/5/15 min) at the start
{r['load_start'][0]:.1f} / {r['load_start'][1]:.1f} / {r['load_start'][2]:.1f}, at the end
{r['load'][0]:.1f} / {r['load'][1]:.1f} / {r['load'][2]:.1f} (the machine was shared with other
sessions' runs).
Generating the log took {r['generate_s']:.1f} s; the whole benchmark {r['wall_s']:.0f} s.

Rerun:

```
{command}
```
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=_args.runs, default=9)
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
