"""CPU time per request, thread by thread: a zmqueue host beside a raw pyzmq echo server.

    python -m benchmarks.percall [--rounds 5] [--count 4000] [--host-tree LABEL=PATH ...]
        [--json] [--write]

Throughput on this 2-CPU machine moves by 15% between runs minutes apart;
the CPU time a server spends on one request moves much less. So this
benchmark sends one request at a time (nothing else runs beside it) and
reads, around each measurement, every thread's CPU time from
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds):

- ``loop``: the server's main thread (zmqueue: the host's request loop;
  raw: the echo server's ``recv_multipart``/``send_multipart`` loop);
- ``io``: libzmq's I/O thread (TCP reads and writes, and the wake-ups
  between it and the main thread);
- ``other``: every other thread of the server (zmqueue: Consul sessions and
  heartbeats, the interval fsync, the health endpoint);
- ``client``: the whole client process (``time.process_time``, its own
  libzmq I/O thread included).

Operations, one request in flight, 100-byte bodies:

- ``raw 1``: the ceiling's echo server (``zmqueue.bench.ceiling``), one
  payload per request, answered with a small ack;
- ``raw 100``: 100 msgpack-packed payloads per request, unpacked by the server;
- ``raw 1, one CPU``: ``raw 1`` with every thread of the server and of this
  process pinned to one CPU (``sched_setaffinity``), affinities restored
  after: what the wake-ups between CPUs cost on this machine;
- ``send 1`` / ``send 100``: ``Queue.send`` / ``Queue.send_batch`` of 100;
- ``send 1, one CPU``: ``send 1`` with every thread of the host and of this
  process on one CPU, like ``raw 1, one CPU``;
- ``receive+delete 1``: ``Queue.receive(1)`` then ``Queue.delete`` (two
  requests per message);
- ``delete_and_receive 100``: receives of 100, each carrying the previous
  batch's deletes (one request per 100 messages);
- ``send 1, R=3 sync``: ``Queue.send`` to a queue with 3 replicas and
  synchronous replication on 3 hosts: the server columns are the host the
  client sends to, the replica columns the other two hosts summed.

One host (``LocalCluster(hosts=1)``, standard queue, ``fsync=interval``;
three for the R=3 row), fresh ones per round and per host tree; ``--host-tree LABEL=PATH``
(repeatable) also runs hosts from another source tree (a ``git archive`` of
an older commit), the trees taking turns round by round. Every process is
stopped by pid at the end. Medians over rounds; ``--write`` puts the table
in docs/perf/percall.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import zmq

import zmqueue
from benchmarks.hosttrees import host_trees, running_cluster
from zmqueue.bench import ceiling

SIZE = 100
BATCH = 100
DOC = Path(__file__).resolve().parents[1] / "docs" / "perf" / "percall.md"
ROLES = ("loop", "io", "other")


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU nanoseconds of ``pid``'s threads so far, by role (see the module doc)."""
    out = dict.fromkeys(ROLES, 0)
    task = Path(f"/proc/{pid}/task")
    for t in task.iterdir():
        try:
            ns = int((t / "schedstat").read_text().split()[0])
            comm = (t / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
        role = "loop" if int(t.name) == pid else "io" if comm.startswith("ZMQbg/IO") else "other"
        out[role] += ns
    return out


def measure(pid: int, requests: int, messages: int, run: Callable[[], None],
            replicas: tuple[int, ...] = ()) -> dict[str, float]:
    """Run ``run`` (``requests`` requests carrying ``messages`` messages) and
    report wall and CPU microseconds per request: of server ``pid`` by role,
    of this (client) process, and summed over the ``replicas`` by role."""
    pids = (pid, *replicas)
    before = [thread_cpu_ns(p) for p in pids]
    c0, t0 = time.process_time(), time.perf_counter()
    run()
    wall, client = time.perf_counter() - t0, time.process_time() - c0
    after = [thread_cpu_ns(p) for p in pids]
    out = {"requests": float(requests), "messages": float(messages),
           "wall_us": wall / requests * 1e6, "client_us": client / requests * 1e6}
    for role in ROLES:
        out[f"{role}_us"] = (after[0][role] - before[0][role]) / 1e3 / requests
        if replicas:
            out[f"replica_{role}_us"] = sum(a[role] - b[role] for a, b in zip(after[1:], before[1:],
                                                                              strict=True)) / 1e3 / requests
    return out


def raw_ops(count: int) -> dict[str, dict[str, float]]:
    server = ceiling.EchoServer.start()
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.endpoint)
        single = ceiling.SINGLE + bytes(SIZE)
        packed = ceiling.BATCH + msgpack.packb([bytes(SIZE)] * BATCH, use_bin_type=True)

        def rounds(frame: bytes, n: int) -> Callable[[], None]:
            def go() -> None:
                for _ in range(n):
                    sock.send(frame)
                    if not sock.poll(5000):
                        raise RuntimeError("the pyzmq echo server stopped answering")
                    sock.recv()
            return go

        rounds(single, 300)()  # warm up
        pid = server.proc.pid
        out = {"raw 1": measure(pid, count, count, rounds(single, count)),
               "raw 100": measure(pid, count // 10, count // 10 * BATCH, rounds(packed, count // 10))}
        if (os.cpu_count() or 1) > 1:
            with one_cpu([pid, os.getpid()]):
                out["raw 1, one CPU"] = measure(pid, count, count, rounds(single, count))
        return out
    finally:
        sock.close(0)
        server.stop()


@contextlib.contextmanager
def one_cpu(pids: list[int]) -> Iterator[None]:
    """Every thread of ``pids`` on one CPU (the first this process may use)
    while the block runs; each thread's affinity restored after (a thread
    started meanwhile keeps that one CPU: the benchmark's threads are all
    running before it)."""
    cpu = min(os.sched_getaffinity(0))
    saved: dict[int, set[int]] = {}
    try:
        for pid in pids:
            for t in Path(f"/proc/{pid}/task").iterdir():
                tid = int(t.name)
                try:
                    cpus = os.sched_getaffinity(tid)
                    os.sched_setaffinity(tid, {cpu})
                except ProcessLookupError:  # (a thread that ended since the listing)
                    continue
                saved[tid] = cpus
        yield
    finally:
        for tid, cpus in saved.items():
            with contextlib.suppress(OSError):  # (a thread that ended meanwhile)
                os.sched_setaffinity(tid, cpus)


def zmqueue_ops(count: int, host_tree: str | None) -> dict[str, dict[str, float]]:
    with running_cluster(host_tree, prefix="zmqueue-percall-") as lc, \
            zmqueue.connect(lc.consul_addr) as client:
        q = client.create_queue("percall", visibility_timeout=600)
        return _queue_ops(q, lc.hosts[0].pid, count)


def replicated_ops(count: int, host_tree: str | None) -> dict[str, dict[str, float]]:
    """``send 1`` to a queue with 3 replicas and synchronous replication, on
    3 hosts: the host the client sends to (whose loop works the most) as the
    server, the other two summed as the replicas."""
    with running_cluster(host_tree, hosts=3, prefix="zmqueue-percall-") as lc, \
            zmqueue.connect(lc.consul_addr) as client:
        pids = [h.pid for h in lc.hosts]
        q = client.create_queue("percall-r3", replication_factor=3, sync_replication=True)
        body = bytes(SIZE)
        probe = [thread_cpu_ns(p)["loop"] for p in pids]
        for _ in range(300):
            q.send(body)  # warm up, and find the host the sends go to
        busiest = max(range(3), key=lambda i: thread_cpu_ns(pids[i])["loop"] - probe[i])
        others = tuple(p for i, p in enumerate(pids) if i != busiest)

        def sends() -> None:
            for _ in range(count):
                q.send(body)

        return {"send 1, R=3 sync": measure(pids[busiest], count, count, sends, others)}


def _queue_ops(q: zmqueue.Queue, pid: int, count: int) -> dict[str, dict[str, float]]:
    body = bytes(SIZE)
    bodies = [body] * BATCH
    for _ in range(300):
        q.send(body)  # warm up routes and connections
    q.purge()
    out: dict[str, dict[str, float]] = {}

    def sends() -> None:
        for _ in range(count):
            q.send(body)

    def batches() -> None:
        for _ in range(count // 10):
            q.send_batch(bodies)

    out["send 1"] = measure(pid, count, count, sends)
    if (os.cpu_count() or 1) > 1:
        with one_cpu([pid, os.getpid()]):
            out["send 1, one CPU"] = measure(pid, count, count, sends)
    out["send 100"] = measure(pid, count // 10, count // 10 * BATCH, batches)
    q.purge()
    for _ in range(count // BATCH):
        q.send_batch(bodies)

    def receive_delete() -> None:
        got = 0
        while got < count:
            msgs = q.receive(1, wait_time=0)
            if not msgs:
                raise RuntimeError(f"the queue ran empty after {got} of {count} messages")
            q.delete(msgs[0])
            got += 1

    out["receive+delete 1"] = measure(pid, 2 * count, count, receive_delete)
    q.purge()
    n = count // 10 * BATCH
    for _ in range(n // BATCH):
        q.send_batch(bodies)
    calls = [0]

    def drain() -> None:
        done: list[zmqueue.Message] = []
        got = 0
        while got < n:
            errors, done = q.delete_and_receive(done, BATCH, wait_time=0)
            if any(errors):
                raise next(e for e in errors if e is not None)
            if not done:
                raise RuntimeError(f"the queue ran empty after {got} of {n} messages")
            got += len(done)
            calls[0] += 1
        q.delete_batch(done)
        calls[0] += 1

    r = measure(pid, 1, n, drain)  # per request below, once the calls are counted
    scale = 1 / calls[0]
    out["delete_and_receive 100"] = {**{k: v * scale for k, v in r.items() if k.endswith("_us")},
                                     "requests": float(calls[0]), "messages": float(n)}
    return out


COLS = ("wall_us", "loop_us", "io_us", "other_us", "client_us", "replica_loop_us", "replica_io_us")


def medians(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    keys = sorted({(r["tree"], r["op"]) for r in rows}, key=lambda k: (k[1].startswith("raw"), k))
    out = {}
    for k in keys:
        mine = [r for r in rows if (r["tree"], r["op"]) == k]
        out[k] = {c: statistics.median(r[c] for r in mine)
                  for c in (*COLS, "requests", "messages") if c in mine[0]}
    return out


def table(med: dict[tuple[str, str], dict[str, float]]) -> str:
    lines = ["| tree | operation | wall us/request | CPU us/request: server loop thread | "
             "server I/O thread | server other threads | client process | server loop thread "
             "per message | replicas' loop threads | replicas' I/O threads |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (tree, op), m in med.items():
        per_msg = m["loop_us"] * m["requests"] / m["messages"]
        reps = (f"{m['replica_loop_us']:.1f} | {m['replica_io_us']:.1f}" if "replica_loop_us" in m
                else "- | -")
        lines.append(f"| {tree} | {op} | {m['wall_us']:.0f} | {m['loop_us']:.1f} | {m['io_us']:.1f} | "
                     f"{m['other_us']:.1f} | {m['client_us']:.1f} | {per_msg:.2f} | {reps} |")
    return "\n".join(lines)


def write_doc(rows: list[dict[str, Any]], med: dict[tuple[str, str], dict[str, float]],
              command: str) -> None:
    load = os.getloadavg()
    text = f"""# CPU time per request: a zmqueue host beside raw pyzmq

Generated by `{command}` on {time.strftime('%Y-%m-%d')}
(Python {platform.python_version()}, pyzmq {zmq.pyzmq_version()}, libzmq {zmq.zmq_version()},
{os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} at the end).
What is measured and how: the docstring of `benchmarks/percall.py`.
Wall-clock microseconds per request, and CPU microseconds per request of
each thread group (medians over rounds), one request in flight; "raw" rows
are the raw pyzmq echo server of `zmqueue.bench.ceiling`; the last column
divides the loop thread's time by the messages a request carries.

{table(med)}

## Every round

```json
""" + "\n".join(json.dumps(r, sort_keys=True) for r in rows) + "\n```\n"
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=4000, help="single requests per operation and round "
                    "(a tenth of it for the batch operations)")
    ap.add_argument("--host-tree", action="append", default=[], metavar="LABEL=PATH",
                    help="also run the host from this source tree (the trees take turns)")
    ap.add_argument("--json", action="store_true", help="print the medians as one JSON line too")
    ap.add_argument("--write", action="store_true", help=f"write docs/perf/{DOC.name}")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 50 or not 100 <= args.count <= 100_000:
        ap.error("--rounds must be 1-50 and --count 100-100000")
    from zmqueue.bench.signals import signals_raise

    trees = host_trees(ap, args.host_tree)
    rows: list[dict[str, Any]] = []
    with signals_raise():  # SIGTERM runs the finally blocks that stop the servers
        for i in range(args.rounds):
            measured = [("raw", raw_ops(args.count))]
            for label, path in trees[i % len(trees):] + trees[:i % len(trees)]:
                measured.append((label, {**zmqueue_ops(args.count, path),
                                         **replicated_ops(args.count, path)}))
            for tree, ops in measured:
                for op, m in ops.items():
                    row = {"round": i + 1, "tree": tree, "op": op, **m}
                    rows.append(row)
                    print(json.dumps(row, sort_keys=True), flush=True)
    med = medians(rows)
    print(table(med))
    if args.json:
        print(json.dumps({f"{t}|{op}": m for (t, op), m in med.items()}, sort_keys=True))
    if args.write:
        given = argv if argv is not None else sys.argv[1:]
        write_doc(rows, med, " ".join(["python -m benchmarks.percall", *given]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
