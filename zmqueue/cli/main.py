"""The ``zmqueue`` command line."""

from __future__ import annotations

import argparse
import sys

import zmqueue.cli.analytics_cmds as analytics_cmds
import zmqueue.cli.bench_cmds as bench_cmds
import zmqueue.cli.keys_cmds as keys_cmds
import zmqueue.cli.usage_cmds as usage_cmds
from zmqueue.cli import cluster_cmds, demo, queue_cmds
from zmqueue.cli.common import OneLineParser, err_console
from zmqueue.errors import ZmqueueError
from zmqueue.version import __version__


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="zmqueue", description=(
        "zmqueue: an SQS-like message queue on a ZeroMQ mesh with a Consul control plane."))
    parser.add_argument("--version", action="version", version=f"zmqueue {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    cluster_cmds.add_parsers(sub)
    demo.add_parser(sub)
    queue_cmds.add_parsers(sub)
    analytics_cmds.add_parsers(sub)
    bench_cmds.add_parsers(sub)
    keys_cmds.add_parsers(sub)
    usage_cmds.add_parsers(sub)
    return parser


def command_name(args: argparse.Namespace) -> str:
    """``zmqueue COMMAND`` and its action or job, if it has one (``zmqueue queue set``),
    as usage errors name it."""
    action = getattr(args, f"{args.command}_command", None)
    return f"zmqueue {args.command}" + (f" {action}" if action else "")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ZmqueueError as exc:
        err_console.print(f"{command_name(args)}: error: {exc}", markup=False, soft_wrap=True)
        return 1
    except OSError as exc:  # a path given on the command line: missing, not writable, ...
        where = f": {exc.filename}" if exc.filename else ""
        err_console.print(f"{command_name(args)}: error: {exc.strerror or exc}{where}", markup=False,
                          soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
