"""What many idle queues cost a host: send latency, idle CPU, queue creation.

    python -m benchmarks.many_queues --steps 0,100,200 --runs 3          # JSON lines + table
    python -m benchmarks.many_queues --steps 0,100,200 --runs 3 --write  # also docs/perf/many_queues.md

Each run starts Consul and 3 hosts (``LocalCluster``) and creates one R=3
probe queue. At each step it creates R=3 queues until there are ``step``
more than the probe (each ``create_queue`` returns once every stream of the
queue has a writer), then measures, with the new queues idle:
- the CPU each host process used over 3 s (user + system, /proc);
- ``--sends`` single 100-byte sends to the probe queue, one at a time;
- how long each of this step's creates took.
It also counts the host log lines saying a request loop stalled (a host
whose loop makes no progress for 5 s withholds its health check).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmqueue
from benchmarks import _args
from zmqueue.bench.machine import machine_summary
from zmqueue.bench.signals import signals_raise
from zmqueue.bench.stats import median, percentiles_ms
from zmqueue.localcluster import LocalCluster

DOC = Path(__file__).resolve().parent.parent / "docs" / "perf" / "many_queues.md"
STALL_LINE = "request loop is not making progress"


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks


def idle_cpu_pct(pids: list[int], window_s: float = 3.0) -> list[float]:
    hz = os.sysconf("SC_CLK_TCK")
    before = [cpu_ticks(p) for p in pids]
    time.sleep(window_s)  # measuring a window, not waiting for something to happen
    return [100.0 * (cpu_ticks(p) - b) / hz / window_s for p, b in zip(pids, before, strict=True)]


def send_latency(q: zmqueue.Queue, n: int) -> dict[str, float]:
    for _ in range(300):  # warm-up
        q.send(b"x" * 100)
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        q.send(b"x" * 100)
        samples.append(time.perf_counter() - t)
    return percentiles_ms(samples)


def stalls(cluster: LocalCluster) -> int:
    logs = cluster.work_dir / "logs"
    return sum(p.read_text(errors="replace").count(STALL_LINE) for p in logs.glob("host-*.log"))


def one_run(steps: list[int], sends: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="zmqueue-bench-") as tmp:
        cluster = LocalCluster(Path(tmp), hosts=3).start()
        try:
            cluster.wait_passing()
            pids = [h.pid for h in cluster.hosts]
            with zmqueue.connect(cluster.consul_addr, request_timeout=30) as client:
                probe = client.create_queue("probe", replication_factor=3)
                made = 0
                for step in steps:
                    took = []
                    while made < step:
                        t = time.perf_counter()
                        client.create_queue(f"idle{made}", replication_factor=3)
                        took.append(time.perf_counter() - t)
                        made += 1
                    cpu = idle_cpu_pct(pids)
                    lat = send_latency(probe, sends)
                    row = {"queues": step + 1, "streams_per_host": 3 * (step + 1),
                           "send_p50_ms": lat["p50"], "send_p99_ms": lat["p99"],
                           "send_p99.9_ms": lat["p99.9"], "idle_cpu_pct": median(cpu),
                           "create_s_median": median(took) if took else 0.0,
                           "create_s_max": max(took, default=0.0),
                           "create_s_total": sum(took), "loop_stalls": stalls(cluster)}
                    print(json.dumps(row), flush=True)
                    out.append(row)
        finally:
            cluster.stop()
    return out


def table(rows: list[list[dict[str, Any]]]) -> str:
    lines = ["| queues (R=3) | streams per host | single send p50 | p99 | p99.9 | idle CPU per host "
             "| create, median / max / total of the step | loop stalls |",
             "|---:|---:|---:|---:|---:|---:|---|---:|"]
    for i, first in enumerate(rows[0]):
        at = [run[i] for run in rows]

        def m(key: str, at: list[dict[str, Any]] = at) -> float:
            return median(r[key] for r in at)
        creates = (f"{m('create_s_median'):.2f} / {m('create_s_max'):.2f} / {m('create_s_total'):.0f} s"
                   if first["queues"] > 1 and m("create_s_total") > 0 else "-")
        lines.append(f"| {first['queues']} | {first['streams_per_host']} | {m('send_p50_ms'):.3f} ms "
                     f"| {m('send_p99_ms'):.2f} ms | {m('send_p99.9_ms'):.2f} ms | {m('idle_cpu_pct'):.1f}% "
                     f"| {creates} | {max(r['loop_stalls'] for r in at)} |")
    return "\n".join(lines)


def write_doc(rows: list[list[dict[str, Any]]], command: str, note: str) -> None:
    note = f"\n{note.strip()}\n" if note.strip() else ""
    DOC.write_text(f"""# Many idle queues: what they cost a host

Generated by `{command}` on {time.strftime('%Y-%m-%d')}; medians of {len(rows)} runs
(loop stalls: the largest count of any run).
Machine: {machine_summary()}.

3 hosts (`LocalCluster(hosts=3)`), R=3 standard queues, `fsync=interval`.
Each step creates idle queues beside one probe queue, then measures the CPU
each host process uses over 3 s with no traffic, and single 100-byte sends to
the probe queue one at a time (after 300 warm-up sends). Creation times are
those of the step's own `create_queue` calls, each of which returns once
every stream of the new queue has a writer. Loop stalls count the host log
lines `{STALL_LINE}` (a loop stuck for 5 s: the host withholds its health
check and can lose its writer locks).

{table(rows)}
{note}
Per run and step (JSON lines):

```
{chr(10).join(json.dumps(r) for run in rows for r in run)}
```
""")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="0,100,200", help="idle queues beside the probe, cumulative")
    ap.add_argument("--runs", type=_args.runs, default=3)
    ap.add_argument("--sends", type=int, default=1500)
    ap.add_argument("--write", action="store_true", help=f"rewrite {DOC.name}")
    ap.add_argument("--note", default="", help="a paragraph to print under the table")
    args = ap.parse_args(argv)
    steps = sorted({int(s) for s in args.steps.split(",")})
    if not steps or steps[0] < 0 or steps[-1] > 2000:
        ap.error("--steps: idle queue counts between 0 and 2000")
    rows = []
    with signals_raise():  # SIGTERM (`timeout`) still stops the cluster's processes
        for _ in range(args.runs):
            rows.append(one_run(steps, args.sends))
    print(table(rows))
    if args.write:
        given = list(argv or sys.argv[1:])
        shown = [a for i, a in enumerate(given)
                 if not a.startswith("--note") and not (i and given[i - 1] == "--note")]
        command = " ".join(shown)
        write_doc(rows, f"python -m benchmarks.many_queues {command}", args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
