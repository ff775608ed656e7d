"""``zmqueue host``, ``zmqueue up``, ``zmqueue status`` and ``zmqueue drain``."""

from __future__ import annotations

import argparse
import faulthandler
import logging
from pathlib import Path
from typing import Any

from zmqueue.cli.common import (
    YEAR_S,
    Number,
    add_consul_flag,
    console,
    consul_addresses,
    hosts_table,
    interrupt_on_signals,
    stale_drains_note,
    watch_hosts,
)
from zmqueue.config import HostConfig
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import drain_flags, list_hosts, partitions_listing
from zmqueue.errors import ZmqueueError


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("host", help="run one queue host (a long-running process)")
    p.add_argument("--cluster", required=True, help="cluster this host belongs to")
    p.add_argument("--node", required=True, help="unique node id of this host")
    p.add_argument("--data-dir", required=True, help="directory for this host's segments")
    add_consul_flag(p)
    p.add_argument("--bind", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--client-port", type=int, default=0, help="client ROUTER port (0 = free)")
    p.add_argument("--pub-port", type=int, default=0, help="replication PUB port (0 = free)")
    p.add_argument("--peer-port", type=int, default=0, help="peer ROUTER port (0 = free)")
    p.add_argument("--http-port", type=int, default=0, help="/health and /metrics port (0 = free)")
    p.add_argument("--zone", default="", help="failure-domain tag used to spread replicas")
    p.add_argument("--curve-secret", default=None, metavar="FILE",
                   help="this host's CURVE .key_secret file: encrypt and authenticate every socket "
                        "(default: off, plaintext; see docs/SECURITY.md)")
    p.add_argument("--key-dir", default=None, metavar="DIR",
                   help="directory of per-queue at-rest keys <queue>.key (never the data dir)")
    p.add_argument("--usage-flush-ms", type=int, default=10_000,
                   help="how often usage records are appended to DATA_DIR/usage.jsonl (default 10000)")
    p.add_argument("--min-free-disk-mb", type=int, default=64, metavar="MB",
                   help="free space kept on the data dir's disk: below it new messages are refused "
                        "(DISK_FULL) while receives and deletes go on (default 64; 0: only after a "
                        "write fails)")
    p.add_argument("--segment-roll-ms", type=int, default=3_600_000, metavar="MS",
                   help="a stream's segment file rolls once its first record is this old (or the "
                        "queue's retention if shorter, at least 60000), so compaction can remove "
                        "consumed messages from disk (a FIFO queue's once older than its 5-minute "
                        "dedup window; default 3600000: an hour)")
    p.add_argument("--outage-grace-ms", type=int, default=60_000, metavar="MS",
                   help="while Consul is unreachable, writers keep their streams this long, then "
                        "stop until it is back (default 60000)")
    p.set_defaults(func=cmd_host)

    p = sub.add_parser("up", help="start Consul (unless --consul) and a local cluster")
    p.add_argument("--hosts", type=Number(int, ge=1, le=16), default=3,
                   help="hosts per cluster, 1-16 (default 3)")
    p.add_argument("--clusters", type=Number(int, ge=1, le=8), default=1,
                   help="number of clusters, 1-8 (default 1)")
    p.add_argument("--data-dir", default=".zmqueue", help="work dir (default ./.zmqueue)")
    add_consul_flag(p, "a running Consul's HTTP address(es) to use; without it a Consul dev agent is "
                       "started (and stopped) with the hosts ($CONSUL_HTTP_ADDR is not read here)")
    p.add_argument("--secure", action="store_true",
                   help="CURVE on every socket with generated, registered keys (docs/SECURITY.md)")
    p.add_argument("--duration", type=Number(float, gt=0, le=YEAR_S), default=None,
                   help="stop after this many seconds, more than 0 (default: run until Ctrl-C)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("status", help="print hosts, clusters and health",
                       description="Print every registered host (cluster, node, health, client endpoint, "
                       "version) and each cluster's count of passing hosts. A host being drained "
                       "shows 'draining, N partitions left' after its health (the partitions that "
                       "still list it among their replicas), then 'drained (0 partitions left)' "
                       "once it can be stopped; a drain flag set for a node that is not registered "
                       "is noted under the table.")
    add_consul_flag(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("drain", help="move every stream off a host (sets zmqueue/hosts/NODE/drain)",
                       description="Drain a host: its cluster's manager moves the partitions it "
                       "holds to other hosts of the cluster as their replacements catch up "
                       "(docs/OPERATOR_GUIDE.md, Steering); `zmqueue status` shows how many "
                       "partitions still list it. --undo clears the flag; nothing moves back by itself.")
    p.add_argument("node", help="the host's node id (as in `zmqueue status`)")
    p.add_argument("--undo", action="store_true", help="undrain: set the flag to false")
    add_consul_flag(p)
    p.set_defaults(func=cmd_drain)


def cmd_host(args: argparse.Namespace) -> int:
    from zmqueue.host import Host

    # a crash in native code (SIGSEGV, SIGBUS, SIGABRT, ...) prints every
    # thread's Python stack to stderr (the host's log) instead of nothing
    faulthandler.enable()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = HostConfig(
        cluster=args.cluster, node=args.node, data_dir=args.data_dir,
        consul=consul_addresses(args.consul), bind_host=args.bind, client_port=args.client_port,
        pub_port=args.pub_port, peer_port=args.peer_port, http_port=args.http_port, zone=args.zone,
        curve_secret_file=args.curve_secret, key_dir=args.key_dir,
        usage_flush_interval_ms=args.usage_flush_ms, min_free_disk_mb=args.min_free_disk_mb,
        segment_roll_ms=args.segment_roll_ms, outage_grace_ms=args.outage_grace_ms,
    )
    host = Host(cfg)
    host.install_signal_handlers()
    host.start()
    host.run()
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from zmqueue.localcluster import LocalCluster

    consul = consul_addresses(args.consul)[0] if args.consul else None
    cluster = LocalCluster(Path(args.data_dir), hosts=args.hosts, clusters=args.clusters,
                           consul=consul, secure=args.secure)
    stop = interrupt_on_signals()
    try:
        with console.status("starting Consul and hosts..."):
            cluster.start()  # on failure or Ctrl-C it stops what it started
    except KeyboardInterrupt:
        console.print("interrupted during start-up; stopped every process this command started")
        return 0
    try:
        console.print(f"Consul UI: [bold]{cluster.ui_url}[/]")
        console.print(hosts_table(cluster.status()))
        if cluster.client_secret_file is not None:
            console.print(f"secured: connect with curve_secret_file='{cluster.client_secret_file}'")
        console.print(f"logs and data in {Path(args.data_dir).resolve()}; Ctrl-C stops everything")
        watch_hosts(cluster, stop, args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        with console.status("stopping..."):
            cluster.stop()
    console.print("stopped every process this command started")
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    from zmqueue.config import validate_ident
    from zmqueue.controlplane import kvlayout as kv

    node = validate_ident(args.node, "node")
    client = ConsulClient(consul_addresses(args.consul), timeout_s=2.0)
    hosts = list_hosts(client)
    known = {h.node for h in hosts}
    client.call(lambda c: c.kv.put(kv.drain_key(node), kv.encode_drain(not args.undo)))
    what = "undrained (nothing moves back by itself)" if args.undo else (
        "draining: its partitions move to the other hosts of its cluster as they catch up; "
        f"`zmqueue queue show` lists replicas, `zmqueue drain {node} --undo` ends it")
    console.print(f"{node}: {what}")
    if node not in known:
        console.print(f"note: no host {node!r} is registered in Consul now (the flag is set anyway)")
    elif not args.undo:
        cluster = next(h.cluster for h in hosts if h.node == node)
        drained = {n for n, on in drain_flags(client).items() if on} | {node}
        if all(h.node in drained for h in hosts if h.cluster == cluster):
            console.print(f"note: every host of cluster {cluster!r} is draining now, so nothing in it has "
                          "another host to move to: its partitions that hold messages stay (the external "
                          "manager moves only empty ones to another cluster) until a host of the cluster "
                          "is undrained or added")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    client = ConsulClient(consul_addresses(args.consul), timeout_s=2.0)
    hosts = list_hosts(client)
    if not hosts:  # (an error: `zmqueue status` is how scripts wait for a cluster to be up)
        raise ZmqueueError(f"no zmqueue hosts registered in Consul at {client.address}")
    flagged = {n for n, on in drain_flags(client).items() if on}
    known = {h.node for h in hosts}
    draining: dict[str, int] = {}
    if flagged & known:  # (the whole tree is read only then: it holds every queue's assignments)
        from zmqueue.controlplane.queue_directory import QueueDirectory

        state = QueueDirectory(client).snapshot().state
        draining = partitions_listing(state, flagged & known)
    console.print(hosts_table(hosts, draining))
    clusters = sorted({h.cluster for h in hosts})
    for c in clusters:
        members = [h for h in hosts if h.cluster == c]
        ok = sum(h.passing for h in members)
        console.print(f"cluster {c}: {ok}/{len(members)} hosts passing")
    stale = stale_drains_note(flagged - known)
    if stale is not None:
        console.print(stale, markup=False, soft_wrap=True)
    return 0
