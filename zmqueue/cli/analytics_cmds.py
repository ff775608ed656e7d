"""``zmqueue analytics report|<job>``: Spark jobs over the segment logs hosts flush.

PySpark and the ``analytics`` package are imported inside the commands, so
``zmqueue --help`` stays fast and works without the ``analytics`` extra.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zmqueue.cli.common import Number, console, err_console
from zmqueue.errors import ConfigError

JOB_HELP = {
    "throughput": "messages sent, received, deleted, dead-lettered per queue per minute",
    "latency": "end-to-end latency (send -> delete) percentiles per queue",
    "deliveries": "receive counts, redeliveries and DLQ moves per queue",
    "receive-counts": "how many receives messages took before delete / DLQ",
    "dlq-moves": "every dead-letter move: source, message id, receive count, target",
    "depth": "queue depth and age of the oldest message at each minute",
    "clients": "top producers and consumers by client identity",
    "replication": "replication lag between the replicas of each partition",
    "corruption": "corrupt or truncated blocks, with the reason",
}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", nargs="+", required=True, metavar="DIR",
                   help="host data directories, or directories holding them (e.g. .zmqueue/data)")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (spark://host:7077, yarn...); default local[2]")
    p.add_argument("--since", default=None, help="only records at or after this time (ISO-8601 or Unix ms)")
    p.add_argument("--until", default=None, help="only records before this time (ISO-8601 or Unix ms)")
    p.add_argument("--queues", default=None, help="comma-separated queue names (default: all)")
    p.add_argument("--key-dir", default=None, metavar="DIR",
                   help="key directory (<queue>.key) to open payloads sealed at rest")


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    a = sub.add_parser("analytics", help="analyse the hosts' logs with Spark (report, jobs)")
    asub = a.add_subparsers(dest="analytics_command", metavar="JOB", parser_class=type(a))
    asub.required = True
    p = asub.add_parser("report", help="every job: Parquet tables, PNG charts and an HTML summary")
    _common(p)
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_report)
    for name, text in JOB_HELP.items():
        p = asub.add_parser(name, help=text)
        _common(p)
        p.add_argument("--out", default=None, metavar="PATH", help="also write the table as Parquet here")
        p.add_argument("--rows", type=Number(int, ge=0), default=50, help="rows to print (default 50)")
        p.set_defaults(func=cmd_job, job=name)


def _options(args: argparse.Namespace) -> dict[str, str]:
    pairs = (("since", args.since), ("until", args.until), ("queues", args.queues), ("keyDir", args.key_dir))
    return {k: v for k, v in pairs if v}


def _check_args(args: argparse.Namespace) -> None:
    """What can be checked before Spark starts (it takes seconds): the local data
    and key directories exist, the times parse and are in order (--rows: checked by its type)."""
    from analytics.options import time_option

    for data in args.data:
        if "://" not in data and not Path(data).is_dir():
            raise ConfigError(f"no such data directory: {data} (give the hosts' --data-dir, or the "
                              "directory holding them)", field="data")
    if args.key_dir and not Path(args.key_dir).is_dir():
        raise ConfigError(f"no such key directory: {args.key_dir} (the hosts' --key-dir, holding "
                          "<queue>.key files)", field="key_dir")
    times = {}
    for name in ("since", "until"):
        value = getattr(args, name)
        if value:
            try:
                times[name] = time_option(f"--{name}", value)
            except ValueError as exc:
                raise ConfigError(str(exc), field=name) from None
    if len(times) == 2 and times["since"] >= times["until"]:
        raise ConfigError(f"--since {args.since} is not before --until {args.until}: no record "
                          "could match", field="since")
    master = getattr(args, "master", None)
    if master and not master.startswith(MASTER_SCHEMES):
        raise ConfigError(f"--master {master!r} is not a Spark master URL: give local[N], spark://HOST:PORT, "
                          "yarn, k8s://... or mesos://...", field="master")
    out = getattr(args, "out", None)
    if out:
        existing = next(p for p in (Path(out).absolute(), *Path(out).absolute().parents) if p.exists())
        if existing != Path(out).absolute() and not existing.is_dir():
            raise ConfigError(f"--out {out}: {existing} is not a directory", field="out")
    local = [d for d in args.data if "://" not in d]
    if local and len(local) == len(args.data):
        from analytics.layout import find_host_dirs

        if not find_host_dirs(local):
            raise ConfigError(f"no zmqueue host data directory under {' '.join(local)} (one holds "
                              "queues/ and host.json): give the hosts' --data-dir, or the directory "
                              "holding them", field="data")


MASTER_SCHEMES = ("local", "spark://", "yarn", "k8s://", "mesos://")


def cmd_report(args: argparse.Namespace) -> int:
    from analytics.report import build_report
    from analytics.session import get_session

    _check_args(args)
    spark = get_session(args.master)
    rep = build_report(spark, args.data, Path(args.out), _options(args), progress=not args.no_progress)
    bad = len(rep.tables["corruption"])
    console.print(f"{rep.records:,} records from {rep.hosts} host(s); report: {Path(args.out) / 'index.html'}"
                  + (f"; {bad} corrupt block(s)" if bad else ""))
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    from analytics.jobs import JOBS
    from analytics.jobs.common import host_count, load_records, one_replica
    from analytics.session import get_session

    _check_args(args)
    spark = get_session(args.master)
    df = load_records(spark, args.data, **_options(args))
    if args.job not in ("replication", "corruption") and host_count(args.data) > 1:
        df = one_replica(df)
    out = JOBS[args.job][0](df)
    if args.out:
        out.coalesce(1).write.mode("overwrite").parquet(args.out)
        err_console.print(f"wrote {args.out}")
    pdf: Any = out.limit(args.rows).toPandas()
    console.print(pdf.to_string(index=False) if len(pdf) else "(no rows)", markup=False, soft_wrap=True)
    return 0
