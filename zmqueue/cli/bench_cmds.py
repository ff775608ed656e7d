"""``zmqueue bench``: a load generator against a running cluster (``--consul``)
or one it starts itself (Consul dev agent + ``--hosts`` hosts, stopped after)."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zmqueue.cli.common import (
    Number,
    StdoutConsole,
    add_consul_flag,
    console,
    consul_addresses,
    err_console,
)
from zmqueue.errors import ConfigError

TABLE_WIDTH = 110

EPILOG = """\
workloads (presets; explicit options override them):
  W1   1 producer, 1 consumer, one send at a time, every send confirmed,
       every message received and deleted: end-to-end msg/s
  W2   the same traffic, read for send latency p50/p99/p99.9
  W3   W1 with batches of 100 (send_batch, receive 100, delete_batch)
  W4   4 producers, 4 consumers
  W5   W1 with replication factor 3, synchronous;  W5b: W3 with R=3 sync
  W1p  W1 with 100 single-message sends in flight (Queue.pipeline);  W5p: W5 the same way

Every run checks each message id it sent: "lost" counts confirmed sends never
received, "dup" counts extra receipts. One JSON line per run goes to stdout.
Send latency is per call of the producer: one message, one batch, or with
--window a group of that many pipelined sends (JSON "send_requests" counts
those calls). A pipeline keeps at most --max-requests SEND requests in
flight and coalesces the sends made meanwhile into the next one (each
message still confirmed with its own id).

examples:
  zmqueue bench --workload W3 --duration 10 --runs 3
  zmqueue bench --size 1024 --producers 4 --consumers 4 --batch 10
  zmqueue bench --consul 127.0.0.1:8500 --workload W5
  python -m benchmarks.peers --runs 3 --write   # the whole table of docs/PERFORMANCE.md
"""


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("bench", help="load-generate against a cluster; throughput, latency, loss check",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", action="append", default=None, metavar="W",
                   help="preset W1, W2, W3, W4, W5, W5b, W1p or W5p (repeatable); default: custom options")
    p.add_argument("--size", type=int, default=None, help="message bytes (default 100)")
    p.add_argument("--producers", type=int, default=None, help="producer processes (default 1)")
    p.add_argument("--consumers", type=int, default=None, help="consumer processes (default 1)")
    p.add_argument("--batch", type=int, default=None, help="messages per send/receive (default 1)")
    p.add_argument("--window", type=int, default=None,
                   help="single-message sends in flight per producer (pipelined; default 1)")
    p.add_argument("--max-requests", type=int, default=None,
                   help="with --window: SEND requests in flight per producer; sends made "
                        "meanwhile go together in the next one (default the queue's partitions, "
                        "FIFO 1; >= window: one each)")
    p.add_argument("--queue-type", choices=["standard", "fifo"], default=None)
    p.add_argument("--replication-factor", type=int, default=None, help="replicas (default 1)")
    p.add_argument("--replication-mode", choices=["sync", "async"], default=None)
    p.add_argument("--sync-quorum", choices=["majority", "all"], default=None,
                   help="zmqueue: replicas a synchronous write waits for (default majority)")
    p.add_argument("--fsync", choices=["always", "interval", "never"], default=None,
                   help="queue durability policy (default interval)")
    p.add_argument("--duration", type=Number(float), default=10.0,
                   help="seconds of sending per run (default 10)")
    p.add_argument("--rate", type=Number(float), default=None,
                   help="total sends/s to pace at (default, or 0: flat out)")
    p.add_argument("--max-messages", type=int, default=None, help="stop sending after this many")
    p.add_argument("--warmup", type=Number(float), default=None, help="seconds not counted in send latency")
    p.add_argument("--runs", type=Number(int, ge=1, le=50), default=1,
                   help="runs per workload, 1-50; the table shows medians")
    p.add_argument("--hosts", type=Number(int, ge=1, le=16), default=3,
                   help="hosts of the cluster it starts, 1-16 (default 3)")
    p.add_argument("--work-dir", default=None, help="where a started cluster keeps data (default temp)")
    p.add_argument("--consumer-mode", choices=["pull", "push"], default=None,
                   help="pull: receive and delete (default); push: a subscription, deletes on its credits")
    p.add_argument("--receives-in-flight", type=int, default=None,
                   help="pull: RECEIVE requests in flight per consumer, the next batch taken while "
                        "one is handled (default 2; 1: one round trip per batch)")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    add_consul_flag(p)
    p.set_defaults(func=cmd_bench)


OPTIONS = {"size": "message_bytes", "producers": "producers", "consumers": "consumers", "batch": "batch",
           "window": "window", "max_requests": "max_requests", "queue_type": "queue_type", "fsync": "fsync",
           "sync_quorum": "sync_quorum", "replication_factor": "replication_factor", "rate": "rate_per_s",
           "max_messages": "max_messages", "warmup": "warmup_s", "consumer_mode": "consumer_mode",
           "receives_in_flight": "receives_in_flight", "duration": "duration_s"}
"""Command-line option (its ``args`` name) -> BenchConfig field."""


def configs(args: argparse.Namespace) -> list[Any]:
    from zmqueue.bench.config import BenchConfig, preset

    overrides: dict[str, Any] = {}
    for opt, field in OPTIONS.items():
        value = getattr(args, opt)
        if value is not None:
            overrides[field] = value
    if args.replication_mode is not None:
        overrides["sync_replication"] = args.replication_mode == "sync"
    try:
        if not args.workload:
            return [BenchConfig(**overrides).validate()]
        return [preset(_preset_name(w), **overrides) for w in args.workload]
    except ConfigError as exc:  # name the option that was given, not the field it sets
        bad_field = exc.details.get("field")
        given = [o for o, f in OPTIONS.items() if f == bad_field and getattr(args, o) is not None]
        if not given or "why" not in exc.details:
            raise
        raise ConfigError(f"--{given[0].replace('_', '-')} {getattr(args, given[0])}: {exc.details['why']}",
                          **exc.details) from None


def _preset_name(w: str) -> str:
    """``w5b`` -> ``W5b``, ``w1P`` -> ``W1p``: the case the presets are named in."""
    return w[:2].upper() + w[2:].lower()


@contextlib.contextmanager
def cluster_address(args: argparse.Namespace) -> Iterator[str]:
    if args.consul:
        yield consul_addresses(args.consul)[0]
        return
    from zmqueue.localcluster import LocalCluster

    with contextlib.ExitStack() as stack:
        work = args.work_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="zmqueue-bench-"))
        err_console.print(f"starting Consul and {args.hosts} host(s) in {work} ...")
        cluster = LocalCluster(Path(work), hosts=args.hosts).start()
        try:
            assert cluster.consul_addr is not None
            yield cluster.consul_addr
        finally:
            cluster.stop()


def cmd_bench(args: argparse.Namespace) -> int:
    from zmqueue.bench.report import results_table

    cfgs = configs(args)
    try:
        rows, clean = _run_all(args, cfgs)
    except KeyboardInterrupt:  # (Ctrl-C, SIGTERM: every process it started is stopped by now)
        err_console.print("zmqueue bench: interrupted; stopped every process it started")
        return 130
    StdoutConsole(width=max(console.width, TABLE_WIDTH)).print(results_table(rows))
    return 0 if clean else 3


def _run_all(args: argparse.Namespace, cfgs: list[Any]) -> tuple[list[dict[str, Any]], bool]:
    from zmqueue.bench.live import LiveProgress
    from zmqueue.bench.report import json_line, summarize
    from zmqueue.bench.runner import run
    from zmqueue.bench.signals import signals_raise
    from zmqueue.bench.zmq_backend import SPEC

    rows: list[dict[str, Any]] = []
    clean = True
    with signals_raise(), cluster_address(args) as consul:
        for cfg in cfgs:
            runs = []
            for i in range(args.runs):
                label = f"zmqueue {cfg.workload} run {i + 1}/{args.runs}"
                with LiveProgress(label, cfg.duration_s, enabled=not args.no_progress) as live:
                    r = run(SPEC, {"consul": consul}, cfg, live.update)
                r["run"] = i + 1
                print(json_line(r), flush=True)
                for e in r["errors"]:
                    err_console.print(f"[red]{label}: {e}[/]", markup=True, highlight=False)
                clean = clean and r["lost"] == 0 and r["duplicates"] == 0 and not r["errors"]
                runs.append(r)
            rows.append(summarize(runs))
    return rows, clean
