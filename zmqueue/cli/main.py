"""The ``zmqueue`` command line."""

from __future__ import annotations

import argparse
import os
import select
import sys

import zmqueue.cli.analytics_cmds as analytics_cmds
import zmqueue.cli.bench_cmds as bench_cmds
import zmqueue.cli.keys_cmds as keys_cmds
import zmqueue.cli.usage_cmds as usage_cmds
from zmqueue.cli import cluster_cmds, demo, queue_cmds
from zmqueue.cli.common import OneLineParser, UsageError, check_numbers, err_console
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


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command (and action or job) ``args`` were parsed for."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None:
            return parser
        parser = subs[0].choices[name]


SIGPIPE_STATUS = 141
"""Exit status when stdout's reader went away (``zmqueue queue list | head -1``):
128 + SIGPIPE, what a shell reports for a command the signal stopped."""


def stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) nobody reads any more."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # (replaced by an object without one: tests)
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser of the command (and action) ``argv`` names, and its arguments.
    A usage error exits 2 (SystemExit), reported by the parser of the command it
    was made in: an unknown option or an extra argument too (the top parser's
    ``parse_args`` reported those as its own: ``zmqueue: error: ...``)."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    command = chosen_parser(parser, args)
    if extras:  # (given before the command: the top parser's)
        before = argv[:argv.index(args.command)] if args.command in argv else []
        (parser if before else command).error(f"unrecognized arguments: {' '.join(before or extras)}")
    return command, args


def main(argv: list[str] | None = None) -> int:
    command, args = parse(sys.argv[1:] if argv is None else list(argv))
    try:
        check_numbers(command, args)
        code = int(args.func(args))
        sys.stdout.flush()  # (a reader gone is seen here, not after the command ended)
        return code
    except UsageError as exc:
        command.error(str(exc))
    except ZmqueueError as exc:
        err_console.print(f"{command_name(args)}: error: {exc}", markup=False, soft_wrap=True)
        return 1
    except BrokenPipeError as exc:
        if not stdout_closed():
            err_console.print(f"{command_name(args)}: error: {exc.strerror or exc}", markup=False,
                              soft_wrap=True)
            return 1
        # stdout's reader stopped reading (`| head`): end quietly, as `yes | head` does; what is
        # still buffered goes nowhere (Python's own flush at exit would fail and print it)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_STATUS
    except OSError as exc:  # a path given on the command line: missing, not writable, ...
        where = f": {exc.filename}" if exc.filename else ""
        err_console.print(f"{command_name(args)}: error: {exc.strerror or exc}{where}", markup=False,
                          soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
