"""Where a workload's CPU goes, process by process: is it bound by the CPUs or by its chain?

    python -m benchmarks.cpu_budget [--workload W1 --workload W3 ...] [--runs 3]
        [--seconds 4] [--warm 2] [--json] [--write]

Runs the ``zmqueue bench`` workloads (``zmqueue.bench.runner``, the same
producer and consumer processes, presets and checks as the peer tables) on
a fresh ``LocalCluster`` (one host for R=1 presets, three for R=3), and
between ``--warm`` s and ``--warm + --seconds`` s into each run's sending
reads every thread's CPU time (``/proc/<pid>/task/<tid>/schedstat``, as
``benchmarks.percall`` does) of the hosts and of the bench's producer and
consumer processes, and the messages received meanwhile. It reports CPU
microseconds per message received:

- ``writer loop`` / ``writer io`` / ``writer other``: the busiest host's
  request-loop thread, its libzmq I/O thread and its other threads (Consul
  sessions and heartbeats, the interval fsync, the health endpoint). One
  queue of one partition: that host is the partition's writer;
- ``replicas``: the other hosts, every thread (R=3 presets);
- ``producers`` / ``consumers``: the bench's processes, every thread;
- ``total``, and ``busy``: the CPU used over the CPU the machine has in the
  window (2 CPUs: 100% = both busy all the time), and ``cpu bound at``: the
  messages/s the machine would reach if all of its CPUs did nothing but this
  work at this cost per message (``CPUs x 1e6 / total``).

A workload whose measured rate is near ``cpu bound at`` (``busy`` near
100%) gets faster only by spending less CPU per message; one far below it
waits on its chain (one request in flight: each message's round trip across
processes). Medians over ``--runs``, each run on a fresh cluster; every
process is stopped by pid at the end. ``--write`` puts the table in
docs/perf/cpu_budget.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.hosttrees import running_cluster
from benchmarks.percall import thread_cpu_ns
from zmqueue.bench import runner
from zmqueue.bench.config import WORKLOADS, preset
from zmqueue.bench.machine import machine_summary
from zmqueue.bench.zmq_backend import SPEC

DOC = Path(__file__).resolve().parents[1] / "docs" / "perf" / "cpu_budget.md"
DEFAULT_WORKLOADS = ("W1", "W3", "W5", "W5b")
COLUMNS = ("writer_loop", "writer_io", "writer_other", "replicas", "producers", "consumers")


def process_cpu_ns(pid: int) -> int:
    """CPU nanoseconds of every thread of ``pid`` so far (0 if it ended)."""
    try:
        return sum(thread_cpu_ns(pid).values())
    except OSError:
        return 0


@dataclass
class Snapshot:
    """Every measured process's CPU at one moment, and the messages received by then."""

    at: float
    received: int
    hosts: dict[int, dict[str, int]]
    clients: dict[str, int] = field(default_factory=dict)
    """``producer-0`` / ``consumer-0`` ... (the runner's process names) -> CPU ns."""


def take(host_pids: list[int], received: int) -> Snapshot:
    clients = {p.name: process_cpu_ns(p.pid) for p in mp.active_children()
               if p.pid is not None and p.name.startswith(("producer-", "consumer-"))}
    return Snapshot(time.monotonic(), received, {pid: thread_cpu_ns(pid) for pid in host_pids}, clients)


def _clients(a: Snapshot, b: Snapshot, prefix: str) -> int:
    return sum(v - a.clients.get(k, 0) for k, v in b.clients.items() if k.startswith(prefix))


def budget(a: Snapshot, b: Snapshot, cpus: int) -> dict[str, float]:
    """CPU microseconds per message received between ``a`` and ``b``, by
    column (see the module doc), with the rate, ``busy`` and ``cpu bound at``."""
    n = b.received - a.received
    if n <= 0:
        raise ValueError("no message was received in the measured window")
    used = {pid: {role: b.hosts[pid][role] - a.hosts[pid][role] for role in b.hosts[pid]} for pid in b.hosts}
    writer = max(used, key=lambda pid: sum(used[pid].values()))
    out = {"writer_loop": used[writer]["loop"], "writer_io": used[writer]["io"],
           "writer_other": used[writer]["other"],
           "replicas": sum(sum(u.values()) for pid, u in used.items() if pid != writer),
           "producers": _clients(a, b, "producer-"), "consumers": _clients(a, b, "consumer-")}
    per_msg = {k: v / 1e3 / n for k, v in out.items()}
    total = sum(per_msg.values())
    seconds = b.at - a.at
    return {**per_msg, "total": total, "msgs_per_s": n / seconds,
            "busy": total * n / 1e6 / (seconds * cpus), "cpu_bound_at": cpus * 1e6 / total}


def one_run(workload: str, seconds: float, warm: float, cpus: int) -> dict[str, Any]:
    cfg = preset(workload, duration_s=warm + seconds + 1.0)
    with running_cluster(None, hosts=max(1, cfg.replication_factor), prefix="zmqueue-cpubudget-") as lc:
        pids = [h.pid for h in lc.hosts]
        marks: list[Snapshot] = []

        def progress(elapsed: float, sent: int, received: int) -> None:
            del sent
            if len(marks) < 2 and elapsed >= warm + seconds * len(marks):
                marks.append(take(pids, received))

        result = runner.run(SPEC, {"consul": lc.consul_addr}, cfg, progress)
    if len(marks) < 2:
        raise RuntimeError(f"{workload}: the run ended before the measured window did")
    return {**budget(marks[0], marks[1], cpus), "workload": workload, "lost": result["lost"],
            "duplicates": result["duplicates"]}


def medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for w in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == w]
        out[w] = {k: statistics.median(r[k] for r in mine)
                  for k in (*COLUMNS, "total", "msgs_per_s", "busy", "cpu_bound_at")}
    return out


def table(med: dict[str, dict[str, float]]) -> str:
    head = ("| workload | msg/s | writer loop | writer io | writer other | replicas | producers "
            "| consumers | total | busy | cpu bound at |")
    lines = [head, "|---" + "|---:" * 10 + "|"]
    for w, m in med.items():
        cells = [f"{m[c]:.1f}" if m["total"] < 100 else f"{m[c]:.0f}" for c in (*COLUMNS, "total")]
        lines.append(f"| {w} | {m['msgs_per_s']:,.0f} | " + " | ".join(cells)
                     + f" | {m['busy']:.0%} | {m['cpu_bound_at']:,.0f} |")
    return "\n".join(lines)


def write_doc(rows: list[dict[str, Any]], med: dict[str, dict[str, float]], command: str) -> None:
    from benchmarks.peers.writeup import code_commit

    per_run = "\n".join(f"| {r['workload']} | {r['msgs_per_s']:,.0f} | {r['total']:.1f} | {r['busy']:.0%} "
                        f"| {r['lost']} / {r['duplicates']} |" for r in rows)
    DOC.write_text(f"""# CPU per message, process by process

`{command}` on the tree of {code_commit()}.

**Machine:** {machine_summary()}. What each column is, and how to read
`busy` and `cpu bound at`, is in the module doc of `benchmarks/cpu_budget.py`.
Microseconds of CPU per message received, medians of {len(rows) // max(1, len(med))} runs:

{table(med)}

Per run (msg/s in the window, total us per message, busy, lost / duplicates over the whole run):

| workload | msg/s | total | busy | lost / dup |
|---|---:|---:|---:|---|
{per_run}
""")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_budget", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS),
                    help=f"a preset (repeatable; default {' '.join(DEFAULT_WORKLOADS)})")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="the measured window")
    ap.add_argument("--warm", type=float, default=2.0, help="seconds of sending before the window")
    ap.add_argument("--json", action="store_true", help="a JSON line per run")
    ap.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(DOC.parents[2])}")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0 or args.warm < 0:
        ap.error("--runs must be at least 1, --seconds above 0, --warm at least 0")
    cpus = os.cpu_count() or 1
    rows = []
    for r in range(args.runs):
        for w in args.workload or DEFAULT_WORKLOADS:
            row = one_run(w, args.seconds, args.warm, cpus)
            rows.append(row)
            if args.json:
                print(json.dumps({"run": r + 1, **{k: round(v, 3) if isinstance(v, float) else v
                                                    for k, v in row.items()}}), flush=True)
    med = medians(rows)
    print(table(med))
    if args.write:
        given = sys.argv[1:] if argv is None else argv
        write_doc(rows, med, " ".join(["python -m benchmarks.cpu_budget", *given]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
