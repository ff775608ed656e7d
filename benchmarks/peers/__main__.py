"""Run the benchmark workloads against zmqueue and the peers, side by side.

    python -m benchmarks.peers --runs 3 --write      # the table of docs/PERFORMANCE.md
    python -m benchmarks.peers --systems zmqueue,redis --workloads W1 --sizes 100 --runs 1

Installs the peers' Debian packages when missing (apt-get), starts each on
127.0.0.1 with private temp data dirs, and stops every server by pid when done,
on error, on Ctrl-C and on SIGTERM. zmqueue runs on a LocalCluster of three
hosts (Consul dev agent) started and stopped the same way.

Runs are interleaved (run 1 of every system, then run 2, ...) so that the
machine's noise falls on all systems alike; the table holds medians.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.peers import harness
from zmqueue.bench import ceiling
from zmqueue.bench.config import BenchConfig, preset
from zmqueue.bench.report import json_line, summarize
from zmqueue.bench.runner import run
from zmqueue.bench.zmq_backend import SPEC as ZMQ_SPEC
from zmqueue.errors import ConfigError
from zmqueue.localcluster import LocalCluster

SPECS = {
    "rabbitmq": "benchmarks.peers.rabbitmq:RabbitBackend",
    "nats": "benchmarks.peers.nats_js:NatsBackend",
    "nats-r3": "benchmarks.peers.nats_js:NatsBackend",
    "redis": "benchmarks.peers.redis_streams:RedisBackend",
    "zmqueue": ZMQ_SPEC,
    "zmqueue-r3": ZMQ_SPEC,
}
SINGLE_NODE = ["zmqueue", "rabbitmq", "nats", "redis"]
REPLICATED = ["zmqueue-r3", "nats-r3"]
CLIENTS = {"rabbitmq": "pika", "nats": "nats", "redis": "redis"}  # each peer's Python client


def missing_clients(systems: list[str]) -> list[str]:
    """The peers' Python client modules that cannot be imported (the ``bench`` extra)."""
    wanted = sorted({CLIENTS[s.split("-")[0]] for s in systems if s.split("-")[0] in CLIENTS})
    return [m for m in wanted if importlib.util.find_spec(m) is None]


@contextlib.contextmanager
def start_all(systems: list[str], work: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """Backend args per system, with every server running until exit."""
    peers = sorted({s.split("-")[0] for s in systems} - {"zmqueue"})
    harness.ensure_installed(peers)
    args: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        if any(s.startswith("zmqueue") for s in systems):
            cluster = LocalCluster(work / "zmqueue", hosts=3).start()
            stack.callback(cluster.stop)
            args["zmqueue"] = args["zmqueue-r3"] = {"consul": cluster.consul_addr}
        for s in systems:
            if s.startswith("zmqueue"):
                continue
            if s == "nats-r3":
                info = stack.enter_context(harness.running("nats", work / "n3", nodes=3))
                args[s] = {"urls": info["urls"], "replicas": 3}
            else:
                info = stack.enter_context(harness.running(s, work / s))
                args[s] = {"urls": info["urls"]} if s == "nats" else {"port": info["port"]}
        yield args


def plan(workloads: list[str], sizes: list[int], systems: list[str],
         duration: float) -> list[tuple[str, BenchConfig]]:
    out = []
    for w in workloads:
        names = REPLICATED if w.startswith("W5") else SINGLE_NODE
        for size in sizes:
            for s in names:
                if s in systems:
                    out.append((s, preset(w, message_bytes=size, duration_s=duration,
                                          warmup_s=min(0.5, duration / 4))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SINGLE_NODE + REPLICATED))
    ap.add_argument("--workloads", default="W1,W1p,W3,W4,W5,W5p,W5b",
                    help="W2 is read from the W1 runs")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--runs", type=int, default=3, help="1-50 (default 3)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds of sending per run")
    ap.add_argument("--half-rate", action=argparse.BooleanOptionalAction, default=True,
                    help="also run zmqueue R=3 sync at half its measured W5 rate (send p99 target; "
                         "default: on)")
    ap.add_argument("--out", default=os.devnull, help="also append every run's JSON line to this file")
    ap.add_argument("--write", action="store_true",
                    help="rewrite docs/PERFORMANCE.md, docs/perf/peers.md and the charts")
    ap.add_argument("--command", dest="from_file_command", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--from", dest="from_file", default=None, metavar="JSONL",
                    help="do not run: rewrite the docs from the JSON lines of an earlier run")
    args = ap.parse_args(argv)
    if args.from_file:
        with open(args.from_file) as f:
            earlier = [json.loads(line) for line in f if line.startswith("{")]
        from benchmarks.peers.writeup import write_all

        write_all(earlier, str(args.from_file_command or "python -m benchmarks.peers --runs 3 --write"))
        _print_table(earlier)
        return 0
    systems = [s for s in args.systems.split(",") if s]
    bad = set(systems) - set(SPECS)
    if bad:
        ap.error(f"unknown systems {sorted(bad)}; known: {sorted(SPECS)}")
    if not 1 <= args.runs <= 50:  # (0 or less started every server for nothing)
        ap.error(f"--runs must be 1 to 50, got {args.runs}")
    try:  # every option checked before anything starts
        sizes = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes must be comma-separated message sizes in bytes, got {args.sizes!r}")
    try:
        todo = plan(args.workloads.split(","), sizes, systems, args.duration)
    except ConfigError as exc:
        ap.error(str(exc))
    missing = missing_clients(systems)
    if missing:  # fail before starting anything, not once per run
        ap.error(f"the peers' Python clients are not installed ({', '.join(missing)}): "
                 "run `.venv/bin/pip install -c ops/constraints.txt -e '.[bench]'` first")
    results: list[dict[str, Any]] = []
    with harness.signals_raise(), tempfile.TemporaryDirectory(prefix="zmqueue-peers-") as tmp, \
            start_all(systems, Path(tmp)) as backend_args, open(args.out, "a") as out:
        for i in range(args.runs):
            for size in sizes:
                results.append(_ceiling(size, i, out))
            for system, cfg in todo:
                results.append(_one(system, cfg, backend_args, i, out))
        if args.half_rate and "zmqueue-r3" in systems:
            results += _half_rate(results, backend_args, args.runs, out)
    if args.write:
        from benchmarks.peers.writeup import write_all

        write_all(results, " ".join(["python -m benchmarks.peers", *(argv or sys.argv[1:])]))
    _print_table(results)
    return 0


def _one(system: str, cfg: BenchConfig, backend_args: dict[str, dict[str, Any]], i: int,
         out: Any) -> dict[str, Any]:
    spec = SPECS[system]
    print(f"run {i + 1}: {system} {cfg.workload} {cfg.message_bytes} B ...", file=sys.stderr, flush=True)
    try:
        r = run(spec, backend_args[system], cfg)
    except Exception as exc:  # one system failing must not lose the others' results
        r = {"errors": [f"{type(exc).__name__}: {exc}"], "config": cfg.to_dict()}
    r.update(system=system, workload=cfg.workload, message_bytes=cfg.message_bytes, run=i + 1)
    line = json_line(r)
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()
    return r


def _ceiling(size: int, i: int, out: Any) -> dict[str, Any]:
    print(f"run {i + 1}: raw pyzmq ceiling {size} B ...", file=sys.stderr, flush=True)
    r: dict[str, Any] = {"system": "raw-pyzmq", "workload": "ceiling", "message_bytes": size, "run": i + 1}
    r.update(ceiling.measure(size, 100, duration_s=2.0, single_count=3000))
    line = json_line(r)
    print(line, flush=True)
    out.write(line + "\n")
    return r


def _half_rate(results: list[dict[str, Any]], backend_args: dict[str, dict[str, Any]], runs: int,
               out: Any) -> list[dict[str, Any]]:
    mine = [r for r in results if r.get("system") == "zmqueue-r3" and r.get("workload") == "W5"
            and r.get("message_bytes") == 100 and "send_msgs_per_s" in r]
    if not mine:
        return []
    rate = summarize(mine)["send_msgs_per_s"] / 2
    cfg = preset("W5", duration_s=5.0, rate_per_s=rate, warmup_s=0.5).with_(workload="W5-half")
    return [_one("zmqueue-r3", cfg, backend_args, i, out) for i in range(runs)]


def _print_table(results: list[dict[str, Any]]) -> None:
    from rich.console import Console

    from zmqueue.bench.report import results_table

    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in results:
        if "send_msgs_per_s" in r:
            groups.setdefault((r["workload"], r["system"], r["message_bytes"]), []).append(r)
    Console(width=120).print(results_table([summarize(g) for _, g in sorted(groups.items())], "peers"))
    for r in results:
        if r.get("errors"):
            print(f"{r.get('system')} {r.get('workload')}: {r['errors'][0][:300]}", file=sys.stderr)



if __name__ == "__main__":
    sys.exit(main())
