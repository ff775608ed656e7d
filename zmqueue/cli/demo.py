"""``zmqueue demo``: a local cluster and a short tour of what it does."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import zmq

from zmqueue.cli.common import console, hosts_table
from zmqueue.client.transport import call
from zmqueue.protocol import Command


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("demo", help="start a local cluster, run a short demo, stop everything")
    p.add_argument("--hosts", type=int, default=3, help="hosts in the cluster (default 3)")
    p.add_argument("--data-dir", default=None, help="work dir (default: a fresh temp dir)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from zmqueue.localcluster import LocalCluster

    work = Path(args.data_dir or tempfile.mkdtemp(prefix="zmqueue-demo-"))
    cluster = LocalCluster(work, hosts=args.hosts)
    with console.status("starting Consul and hosts..."):
        cluster.start()
    try:
        console.print(f"Consul UI: [bold]{cluster.ui_url}[/]")
        hosts = cluster.status()
        console.print(hosts_table(hosts))
        ctx = zmq.Context()
        try:
            for h in hosts:
                pong = call(ctx, h.client_endpoint, Command.PING)
                console.print(f"PING {h.node}: pong from {pong['node']}")
        finally:
            ctx.term()
    finally:
        with console.status("stopping..."):
            cluster.stop()
    console.print(f"stopped every process the demo started; logs in {work}")
    return 0
