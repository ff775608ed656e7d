"""Shared CLI plumbing: a parser whose errors are one line, and output helpers."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import NoReturn

from rich.console import Console
from rich.table import Table

from zmqueue.config import check_consul_addresses, from_env, parse_consul_addresses
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.errors import ConfigError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix, exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def consul_addresses(value: str | None) -> tuple[str, ...]:
    addrs = parse_consul_addresses(value) if value else from_env()["consul"]
    if not addrs:
        raise ConfigError("no Consul address given: pass --consul HOST:PORT")
    check_consul_addresses(addrs)
    return tuple(addrs)


def add_consul_flag(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--consul", metavar="HOST:PORT[,HOST:PORT]",
                   help=help or "Consul HTTP address(es); default $CONSUL_HTTP_ADDR or 127.0.0.1:8500")


def hosts_table(hosts: list[HostInfo]) -> Table:
    table = Table(title="zmqueue hosts")
    for col in ("cluster", "node", "health", "client endpoint", "version"):
        table.add_column(col)
    colors = {"passing": "green", "warning": "yellow", "critical": "red"}
    for h in hosts:
        color = colors.get(h.status, "red")
        advisories = [what for what, status in (("disk below reserve", h.disk_status),
                                                ("bad KV values", h.kv_status)) if status != "passing"]
        notes = f" [yellow]({', '.join(advisories)})[/]" if advisories else ""
        table.add_row(h.cluster, h.node, f"[{color}]{h.status}[/]{notes}", h.client_endpoint, h.version)
    return table


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
