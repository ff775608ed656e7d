"""Shared CLI plumbing: a parser whose errors are one line, number options
checked for range, and output helpers."""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Console
from rich.table import Table

from zmqueue.config import check_consul_addresses, from_env, parse_consul_addresses
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.errors import ConfigError

if TYPE_CHECKING:
    from zmqueue.localcluster import LocalCluster


class StdoutConsole(Console):
    """rich's Console for stdout, but a reader gone (``zmqueue queue list | head -1``)
    raises BrokenPipeError, as ``print`` does, for ``main`` to end the command as it
    does then (rich's own answer is SystemExit(1): an error status, and
    ``print``'s and rich's output ended differently)."""

    def on_broken_pipe(self) -> None:
        del self._buffer[:]  # (as rich does when quiet: dropped, not written again by the next print)
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


console = StdoutConsole(highlight=False)
err_console = Console(stderr=True, highlight=False)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix, exit code 2."""

    positionals_anywhere = False
    """Set on a sub-command's parser whose positionals may come anywhere among its
    options (``zmqueue send Q --attr k=v BODY``): plain argparse gives an optional
    positional (``BODY``) nothing when an option follows the one before it, and
    the word after the option is then refused as an unrecognized argument.
    argparse's intermixed parsing cannot run over sub-parsers, but it can inside
    one (without sub-parsers of its own): the parser of sub-commands calls this
    one's ``parse_known_args``."""
    _intermixing = False

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        if not self.positionals_anywhere or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # (parse_known_intermixed_args calls parse_known_args twice)
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


class UsageError(Exception):
    """Raised by a command for a mistake in its arguments that only it can see
    (``zmqueue queue set NAME`` with no setting): reported as argparse reports
    its own, by the command's parser (one line, see --help, exit 2)."""


YEAR_S = 365 * 86400


class Number:
    """An argparse ``type=`` for a number option: an ``int``, or a finite ``float``
    (``nan``, ``inf``: a usage error, exit 2, as any word that is not a number).

    The bounds (``ge``/``gt`` below, ``le`` above) are not checked here: a value
    the parser took but that is out of range is an error of exit status 1
    (docs/USER_GUIDE.md, Command line), checked after parsing by
    :func:`check_numbers`, which names the option."""

    def __init__(self, kind: type[int] | type[float], *, ge: float | None = None, gt: float | None = None,
                 le: float | None = None) -> None:
        self.kind, self.ge, self.gt, self.le = kind, ge, gt, le
        self.__name__ = kind.__name__  # (argparse: "invalid int value: 'x'")

    def __call__(self, text: str) -> int | float:
        value = self.kind(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        return value

    def check(self, option: str, value: float) -> None:
        """ConfigError naming ``option`` if ``value`` is out of range."""
        if ((self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
                or (self.le is not None and value > self.le)):
            raise ConfigError(f"{option} must be {self.range()}, got {shown(value)}",
                              field=option.lstrip("-").replace("-", "_"))

    def range(self) -> str:
        """``1 to 16``, ``0 or more``, ``more than 0 and at most 31536000``."""
        if self.ge is not None and self.le is not None:
            return f"{shown(self.ge)} to {shown(self.le)}"
        low = f"{shown(self.ge)} or more" if self.ge is not None else (
            f"more than {shown(self.gt)}" if self.gt is not None else "")
        high = f"at most {shown(self.le)}" if self.le is not None else ""
        return " and ".join(part for part in (low, high) if part)


def shown(x: float) -> str:
    """A number as it would be typed: ``5`` for 5.0, ``0.5``, ``1e+300``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The number options ``parser`` took in ``args`` (type :class:`Number`) are in
    range; ConfigError naming the first that is not."""
    for action in parser._actions:
        value: Any = getattr(args, action.dest, None)
        if not isinstance(action.type, Number) or value is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            action.type.check(action.option_strings[0] if action.option_strings else action.dest, v)


def consul_addresses(value: str | None) -> tuple[str, ...]:
    addrs = parse_consul_addresses(value) if value else from_env()["consul"]
    if not addrs:
        raise ConfigError("no Consul address given: pass --consul HOST:PORT")
    check_consul_addresses(addrs)
    return tuple(addrs)


def add_consul_flag(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--consul", metavar="HOST:PORT[,HOST:PORT]",
                   help=help or "Consul HTTP address(es); default $CONSUL_HTTP_ADDR or 127.0.0.1:8500")


def hosts_table(hosts: list[HostInfo], draining: Mapping[str, int] | None = None) -> Table:
    """The hosts, one row each. ``draining``: node -> partitions that still list
    it among their replicas, for the hosts whose drain flag is set; their
    health cell says so (:func:`drain_note`), the other rows are unchanged."""
    table = Table(title="zmqueue hosts")
    for col in ("cluster", "node", "health", "client endpoint", "version"):
        # on a narrow console (80 columns when piped) only the health notes wrap: the
        # others were shortened, so every host's endpoint ended in "…"
        table.add_column(col, no_wrap=col != "health")
    colors = {"passing": "green", "warning": "yellow", "critical": "red"}
    for h in hosts:
        color = colors.get(h.status, "red")
        advisories = [what for what, status in (("disk below reserve", h.disk_status),
                                                ("bad KV values", h.kv_status)) if status != "passing"]
        notes = f" [yellow]({', '.join(advisories)})[/]" if advisories else ""
        if draining is not None and h.node in draining:
            notes += f"; [cyan]{drain_note(draining[h.node])}[/]"
        table.add_row(h.cluster, h.node, f"[{color}]{h.status}[/]{notes}", h.client_endpoint, h.version)
    return table


def drain_note(left: int) -> str:
    """How far a host's drain has got: ``draining, 3 partitions left``, then
    ``drained (0 partitions left)`` once no partition lists it (it may be stopped)."""
    if left == 0:
        return "drained (0 partitions left)"
    return f"draining, {left} partition{'s' if left != 1 else ''} left"


def stale_drains_note(nodes: Iterable[str]) -> str | None:
    """The line under the hosts table for drain flags set on nodes that are not
    registered (a host drained, then stopped), or None when there is none."""
    stale = sorted(nodes)
    if not stale:
        return None
    return (f"note: drain flag set for nodes not registered in Consul: {', '.join(stale)} (left by "
            "hosts since stopped? `zmqueue drain NODE --undo` clears one)")


def interrupt_on_signals() -> threading.Event:
    """Make Ctrl-C (SIGINT) and SIGTERM raise KeyboardInterrupt in the main
    thread, once, so a command that started processes stops them by pid;
    the returned event is set too, for the command's waits.

    Needed twice over: a process started as a background job inherits SIGINT
    *ignored* (so Ctrl-C or ``kill -INT`` would do nothing), and SIGTERM's
    default action kills the command at once, leaving its hosts running.
    After the first signal both are ignored, so a second one cannot cut the
    stopping short. The event matters because the KeyboardInterrupt can be
    lost: raised while a finalizer runs (urllib3 closing a collected
    connection pool), Python prints it as "Exception ignored" and goes on, and
    ``zmqueue up`` then ran out its whole --duration with both signals ignored."""
    stop = threading.Event()

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    return stop


WATCH_S = 0.5  # how often `up` (and `demo --keep`) look for hosts that exited


def watch_hosts(cluster: LocalCluster, stop: threading.Event, duration: float | None) -> None:
    """Wait for ``stop`` (a signal) or ``duration`` seconds; meanwhile say of each
    host that exits (killed, crashed) how it ended, reaping it. Nothing restarts
    it: the others go on (the cluster's failover is what this shows); Ctrl-C
    stops everything as before."""
    from zmqueue.localcluster.hosts import exit_status

    deadline = None if duration is None else time.monotonic() + duration
    while True:
        left = WATCH_S if deadline is None else min(WATCH_S, deadline - time.monotonic())
        if left <= 0 or stop.wait(left):  # (set by a signal whose KeyboardInterrupt was lost, too)
            return
        for h, status in cluster.newly_exited():
            running = sum(1 for o in cluster.hosts if o.alive())
            console.print(f"host {h.node} (pid {h.pid}) exited: {exit_status(status)}; not restarted "
                          f"({running} of {len(cluster.hosts)} hosts running; log: {h.proc.log_path})",
                          markup=False, soft_wrap=True)  # (one line, for a log's reader and grep)
