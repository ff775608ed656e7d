"""``zmqueue usage``: requests and bytes per client identity and queue,
summed from the hosts' ``usage.jsonl`` records."""

from __future__ import annotations

import argparse
import csv
import sys
import time
from typing import Any

from rich.table import Table

from zmqueue.cli.common import Number, console
from zmqueue.errors import ConfigError
from zmqueue.security.usage import aggregate, find_files

COLUMNS = ("identity", "queue", "requests", "bytes_in", "bytes_out")


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("usage", help="usage per client identity and queue (for billing)")
    p.add_argument("--data", nargs="+", required=True, metavar="DIR",
                   help="host data dirs (or any dir above them, or usage.jsonl files)")
    p.add_argument("--since-s", type=Number(float, ge=0), default=None, metavar="N",
                   help="only the records of the last N seconds (N >= 0)")
    p.add_argument("--csv", default=None, metavar="FILE", help="write CSV here ('-' = stdout)")
    p.set_defaults(func=cmd_usage)


def cmd_usage(args: argparse.Namespace) -> int:
    files = find_files(args.data)
    if not files:
        raise ConfigError(f"no usage.jsonl under {' '.join(args.data)}: give the hosts' --data-dir (a "
                          "host writes its usage records there every --usage-flush-ms)", field="data")
    since = int((time.time() - args.since_s) * 1000) if args.since_s is not None else 0
    rows = aggregate(files, since)
    if args.csv:
        out = sys.stdout if args.csv == "-" else open(args.csv, "w", newline="")  # noqa: SIM115
        try:
            w = csv.DictWriter(out, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
        finally:
            if out is not sys.stdout:
                out.close()
        if args.csv == "-":
            return 0
    table = Table(title=f"usage from {len(files)} file(s)")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col not in ("identity", "queue") else "left")
    for r in rows:
        table.add_row(*(str(r[c]) for c in COLUMNS))
    console.print(table)
    return 0
