"""``zmqueue demo``: a local cluster and a short tour of what it does.

It starts a Consul dev agent and hosts (as ``zmqueue up`` does), creates a
standard and a FIFO queue, moves a few thousand messages through them with a
progress bar, compares single sends one at a time with pipelined ones (many in
flight), shows a visibility timeout expiring and a message landing in a
dead-letter queue and being redriven back, kills (kill -9) the host that takes
a replicated queue's pipelined sends half way through them and checks that
every confirmed message arrives, then starts it again, prints a summary and
the Consul UI address, and stops every process it started.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import zmqueue
from zmqueue.cli.common import YEAR_S, Number, console, hosts_table, interrupt_on_signals, watch_hosts

if TYPE_CHECKING:
    from zmqueue.localcluster import LocalCluster


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser("demo", help="start a local cluster, run a short demo, stop everything")
    p.add_argument("--hosts", type=Number(int, ge=1, le=16), default=3,
                   help="hosts in the cluster, 1-16 (default 3)")
    p.add_argument("--messages", type=Number(int, ge=1), default=5000,
                   help="messages per queue, 1 or more (default 5000)")
    p.add_argument("--data-dir", default=None, help="work dir (default: a fresh temp dir)")
    p.add_argument("--keep", type=Number(float, ge=0, le=YEAR_S), default=0,
                   help="keep the cluster up this many seconds at the end (to browse the Consul UI; "
                        "default 0)")
    p.set_defaults(func=cmd_demo)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


def pump(q: zmqueue.Queue, n: int, fifo: bool) -> tuple[float, int]:
    """Send n messages in batches, receive (``Queue.receive_pipeline``) and
    delete them all; (seconds, received)."""
    start = time.monotonic()
    received: set[str] = set()
    with _progress() as progress:
        sent_task = progress.add_task(f"send    {q.name}", total=n)
        recv_task = progress.add_task(f"receive {q.name}", total=n)
        for i in range(0, n, 100):
            batch = [zmqueue.OutgoingMessage(f"msg {j}".encode(), group_id=f"g{j % 8}" if fifo else None,
                                             dedup_id=f"d{j}" if fifo else None)
                     for j in range(i, min(n, i + 100))]
            q.send_batch(batch)
            progress.advance(sent_task, len(batch))
        deadline = time.monotonic() + 60
        # the next batch is taken while this one is handled; deletes ride on the requests
        with q.receive_pipeline(max_messages=100, wait_time=1) as pipe:
            while len(received) < n and time.monotonic() < deadline:
                msgs = pipe.receive()
                pipe.delete(msgs)
                received.update(m.id for m in msgs)
                progress.update(recv_task, completed=len(received))
        pipe.raise_failed()
    return time.monotonic() - start, len(received)


def show_pipeline(q: zmqueue.Queue, n: int = 2000) -> None:
    """Single-message sends one at a time, then the same through a pipeline."""
    one = max(1, n // 10)
    t0 = time.monotonic()
    for i in range(one):
        q.send(f"single {i}".encode())
    one_rate = one / (time.monotonic() - t0)
    t0 = time.monotonic()
    with q.pipeline(window=100) as pipe:
        for i in range(n):
            pipe.send(f"pipelined {i}".encode())
    piped_rate = n / (time.monotonic() - t0)
    console.print(f"  {one} sends one at a time: {one_rate:,.0f} msg/s; {n} through "
                  f"q.pipeline(window=100): {piped_rate:,.0f} msg/s, each confirmed on its own")
    q.purge()


def show_visibility_and_dlq(client: zmqueue.Client) -> list[str]:
    notes = []
    q = client.create_queue("demo-retry", visibility_timeout=1, dead_letter_queue="demo-dlq",
                            max_receive_count=2)
    q.send(b"a message nobody manages to process", attributes={"order": "42"})
    for attempt in (1, 2):
        [m] = q.receive(wait_time=5)
        console.print(f"  receive #{attempt}: receive_count={m.receive_count}; not deleting it")
        if attempt == 1:
            t0 = time.monotonic()
            [again] = q.receive(wait_time=5)
            console.print(f"  visibility timeout expired: visible again after "
                          f"{time.monotonic() - t0:.1f} s (receive_count={again.receive_count})")
            break
    q.receive(wait_time=3)  # the attempt past max_receive_count moves it to the DLQ
    dlq = client.get_queue("demo-dlq")
    deadline = time.monotonic() + 10
    got: list[zmqueue.Message] = []
    while not got and time.monotonic() < deadline:
        got = dlq.receive(wait_time=1)
    if got:
        d = got[0]
        console.print(f"  in the dead-letter queue: {d.body!r} from {d.dead_letter_source!r}, "
                      f"receive_count={d.receive_count}, attributes={d.attributes}")
        notes.append("DLQ move: yes")
        dlq.change_visibility(d, 0)  # give it back to the DLQ, then redrive it
        report = dlq.redrive(wait_time=0.5)
        back = q.receive(wait_time=5)
        if back:
            q.delete(back[0])
            console.print(f"  redriven: {report.total} moved back to {q.name!r}, received there "
                          f"again (receive_count={back[0].receive_count}) and deleted")
            notes.append("DLQ redrive: yes")
    return notes


def show_failover(client: zmqueue.Client, cluster: LocalCluster, n: int = 2000) -> bool:
    """Pipelined sends to a queue with 3 replicas; the host taking them is
    killed (kill -9) half way, then started again. Every confirmed message is
    received; True if so."""
    q = client.create_queue("demo-failover", replication_factor=3, sync_replication=True)
    taker_ep = q.routes.for_send(0)[0]
    node = next(n for n, ep in q.routes.part(0).endpoints.items() if ep == taker_ep)
    with q.pipeline(window=16) as pipe:
        pending = [pipe.send(f"event {i}".encode()) for i in range(n // 2)]
        cluster.host(node).kill9()
        pending += [pipe.send(f"event {i}".encode()) for i in range(n // 2, n)]
    longest = max(p.done_at - p.sent_at for p in pending)
    confirmed = {p.id for p in pending if p.id}
    got: dict[str, bytes] = {}
    deadline = time.monotonic() + 60
    while not confirmed <= got.keys() and time.monotonic() < deadline:
        msgs = q.receive(max_messages=100, wait_time=1)
        got.update((m.id, m.body) for m in msgs)
        if msgs:
            q.delete_batch(msgs)
    console.print(f"  kill -9 of {node} (it took the sends) after {n // 2} of {n} pipelined sends: "
                  f"{len(confirmed)} confirmed, {pipe.retried} sent again to another replica, the "
                  f"longest took {longest:.2f} s (request timeout {client.request_timeout_ms / 1000:.0f} s: "
                  f"the dead host's connection dropped)")
    lost = len(confirmed - got.keys())
    twice = len(got) - len(set(got.values()))
    console.print(f"  received {len(confirmed & got.keys())} of the {len(confirmed)} confirmed "
                  f"({lost} lost, {twice} stored twice)")
    if twice:
        console.print("  (standard queues are at least once: a send the dead host had stored but "
                      "not confirmed was sent again to a replica that had not applied it yet, and "
                      "stored there too; a replica that had applied it answers with the first id)")
    with console.status(f"starting {node} again..."):
        cluster.restart_host(node)
        cluster.wait_passing(nodes=[node])
    console.print(f"  {node} started again from its data directory and is passing")
    return lost == 0


def cmd_demo(args: argparse.Namespace) -> int:
    from zmqueue.localcluster import LocalCluster

    work = Path(args.data_dir or tempfile.mkdtemp(prefix="zmqueue-demo-"))
    cluster = LocalCluster(work, hosts=args.hosts)
    stop = interrupt_on_signals()
    with console.status("starting Consul and hosts..."):
        cluster.start()
    try:
        console.print(f"Consul UI: [bold]{cluster.ui_url}[/]")
        console.print(hosts_table(cluster.status()))
        summary = Table(title="demo summary")
        for col in ("queue", "type", "replicas", "messages", "received", "seconds", "msgs/s"):
            summary.add_column(col)
        with zmqueue.connect(cluster.consul_addr) as client:
            for name, fifo in (("demo-standard", False), ("demo-orders.fifo", True)):
                q = client.create_queue(name, fifo=fifo, replication_factor=min(3, args.hosts),
                                        sync_replication=True)
                secs, got = pump(q, args.messages, fifo)
                summary.add_row(name, "fifo" if fifo else "standard",
                                f"{q.config.replication_factor} (sync)", str(args.messages), str(got),
                                f"{secs:.2f}", f"{2 * args.messages / secs:,.0f}")
            console.print("[bold]pipelined sends[/] (demo-standard)")
            show_pipeline(client.get_queue("demo-standard"))
            console.print("[bold]visibility timeout and dead-letter queue[/]")
            show_visibility_and_dlq(client)
            if args.hosts >= 3:
                console.print("[bold]a host killed while sends flow[/] (demo-failover: 3 replicas, sync)")
                if not show_failover(client, cluster):
                    console.print("[red]confirmed messages were lost: please report this[/]")
                    return 1
            console.print(summary)
            console.print(f"queues: {', '.join(client.list_queues())}")
        console.print(f"Consul UI: [bold]{cluster.ui_url}[/] (services: zmqueue; KV: zmqueue/)")
        if args.keep > 0:
            console.print(f"keeping the cluster up for {args.keep:.0f} s; Ctrl-C to stop now")
            watch_hosts(cluster, stop, args.keep)  # (says of a host that exits meanwhile)
    except KeyboardInterrupt:
        pass
    finally:
        with console.status("stopping..."):
            cluster.stop()
    console.print(f"stopped every process the demo started; logs and data in {work}")
    return 0
