"""What parked long polls cost a busy host.

    python -m benchmarks.parked [--cases 1,2000,64x64] [--duration 4] [--runs 3]
        [--host-tree LABEL=PATH ...] [--write]

One host (and a Consul dev agent), two standard queues:

- ``idle``: its ring full (65,536 messages), every message received and in
  flight for 10 minutes, and long polls parked on it (RECEIVE, wait 20 s,
  sent on one DEALER): SQS-style consumers waiting on an empty queue while
  the messages are being worked on elsewhere. ``--cases`` lists how many,
  each case in turn: ``P`` polls on one partition, or ``PxN`` polls spread
  over N partitions (1-64) of the queue; ``0xN``: instead of polls, one push
  subscription (prefetch 10) over its N partitions, from a process of its own;
- ``busy``: one producer thread, ``send_batch`` of 100 x 100 B, flat out.

Each run measures the busy queue's send rate for ``--duration`` seconds
without parked polls, then with them (answered empty at the end of the
run, before their 20 s run out), on the same host; the ratio is the share of
its send rate the host keeps while the polls wait. Every process is stopped
by pid at the end. One JSON line per run, then the medians.

``--host-tree LABEL=PATH`` (repeatable) runs the host processes from another
source tree (a ``git archive`` of an older commit, say: PYTHONPATH is set for
them; the client is this tree's), the trees taking turns run by run, so an
old and a new host are measured side by side in one invocation. ``--write``
puts the table in docs/perf/parked.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import zmq

import zmqueue
from benchmarks import _args
from benchmarks.hosttrees import host_trees, running_cluster, tree_env
from zmqueue import protocol
from zmqueue.protocol import Command

FILL = 65_536
WAIT_MS = 20_000
PARK_TIMEOUT_S = 10.0


def _send_rate(q: Any, duration_s: float) -> float:
    bodies = [b"b" * 100] * 100
    sent = 0
    start = time.perf_counter()
    end = start + duration_s
    while time.perf_counter() < end:
        q.send_batch(bodies)
        sent += len(bodies)
    return sent / (time.perf_counter() - start)


def _fill_in_flight(q: Any) -> None:
    for _ in range(FILL // 1000):
        q.send_batch([b"i" * 100] * 1000)
    q.send_batch([b"i" * 100] * (FILL % 1000))
    taken = 0
    deadline = time.monotonic() + 60
    while taken < FILL:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {taken} of {FILL} messages received within 60 s")
        taken += len(q.receive(1000, visibility_timeout=600))


def _until(check: Any, what: str, timeout_s: float = PARK_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def _subscribe(consul: str, ready: Any, stop: Any) -> None:
    """In a process of its own (its client thread would share the producer's
    GIL): one push subscription (prefetch 10) on every partition of ``idle``."""
    client = zmqueue.connect(consul)
    try:
        sub = client.get_queue("idle").subscribe(lambda m: None, prefetch=10)
        _until(lambda: sub.serving_all, "the subscription to serve every partition")
        ready.set()
        stop.wait(60)
        sub.close()
    finally:
        client.close()


class _Subscriber:
    """The subscribing process, stopped by its pid at the end."""

    def __init__(self, proc: Any, stop: Any) -> None:
        self.proc, self.stop_event = proc, stop

    @classmethod
    def start(cls, consul: str) -> _Subscriber:
        ctx = mp.get_context("spawn")
        ready, stop = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_subscribe, args=(consul, ready, stop), daemon=True)
        proc.start()
        sub = cls(proc, stop)
        if not ready.wait(PARK_TIMEOUT_S * 3):
            sub.stop()
            raise RuntimeError("the subscribing process did not subscribe in time")
        return sub

    def stop(self) -> None:
        self.stop_event.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def one_run(polls: int, duration_s: float, host_tree: str | None = None,
            partitions: int = 1) -> dict[str, Any]:
    """``polls`` 0: one push subscription (prefetch 10) instead, over every partition."""
    with running_cluster(host_tree, prefix="zmqueue-parked-") as lc:
        sock: zmq.Socket[bytes] | None = None
        client = None
        try:
            client = zmqueue.connect(lc.consul_addr)
            client.create_queue("idle", visibility_timeout=600, partitions=partitions)
            client.create_queue("busy")
            idle, busy = client.get_queue("idle"), client.get_queue("busy")
            _fill_in_flight(idle)
            _send_rate(busy, 0.5)  # warm up
            alone = _send_rate(busy, duration_s)
            info = json.loads((lc.work_dir / "data" / lc.hosts[0].node / "host.json").read_text())
            sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(info["client_endpoint"])
            t0 = time.monotonic()
            for rid in range(1, polls + 1):
                sock.send(protocol.encode_request(
                    Command.RECEIVE, rid, {"q": "idle", "p": (rid - 1) % partitions, "max": 1,
                                           "wait_ms": WAIT_MS}))
            _until(lambda: idle.stats()["waiters"] >= polls, f"{polls} polls parked")
            sub = None if polls else _Subscriber.start(lc.consul_addr or "")
            try:
                parked = _send_rate(busy, duration_s)
            finally:
                if sub is not None:
                    sub.stop()
            still = idle.stats()["waiters"]
            if time.monotonic() - t0 >= WAIT_MS / 1000:
                raise RuntimeError("the polls' wait ran out during the run: use a shorter --duration")
            return {"polls": polls, "partitions": partitions, "alone_msgs_per_s": alone,
                    "parked_msgs_per_s": parked, "ratio": parked / alone, "waiters_at_end": still}
        finally:
            if sock is not None:
                sock.close(0)
            if client is not None:
                client.close()


DOC = Path(__file__).resolve().parents[1] / "docs" / "perf" / "parked.md"


def micro_of(tree: str | None) -> dict[str, float]:
    """benchmarks/watch_micro.py (in-process costs) on ``tree``'s code (None: this tree's)."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, **tree_env(tree or str(root))}
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "watch_micro.py"), "--json"],
                         env=env, check=True, capture_output=True, text=True, timeout=600).stdout
    return {k: float(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def write_doc(rows: list[dict[str, Any]], micro: dict[str, dict[str, float]], command: str) -> None:
    keys = list(dict.fromkeys((r["polls"], r["partitions"], r["tree"]) for r in rows))

    def mine(polls: int, parts: int, tree: str) -> list[dict[str, Any]]:
        return [r for r in rows if (r["polls"], r["partitions"], r["tree"]) == (polls, parts, tree)]

    def med(polls: int, parts: int, tree: str, k: str) -> float:
        return float(statistics.median(r[k] for r in mine(polls, parts, tree)))

    summary = [[str(p), str(n), t, f"{med(p, n, t, 'alone_msgs_per_s'):,.0f}",
                f"{med(p, n, t, 'parked_msgs_per_s'):,.0f}", f"{med(p, n, t, 'ratio'):.2f}x",
                str(len(mine(p, n, t)))] for p, n, t in keys]
    per_run = [[str(i + 1), str(r["polls"]), str(r["partitions"]), r["tree"], f"{r['alone_msgs_per_s']:,.0f}",
                f"{r['parked_msgs_per_s']:,.0f}", f"{r['ratio']:.2f}x"] for i, r in enumerate(rows)]

    def table(header: list[str], body: list[list[str]]) -> str:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])

    DOC.write_text(f"""# Parked long polls: what they cost a busy host

Generated by `{command}` on {time.strftime("%Y-%m-%d")}; medians per host tree,
the trees taking turns run by run. Machine: {os.cpu_count()} CPUs, {platform.platform()},
Python {platform.python_version()}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}.

One host, two standard queues: `idle` holds a full ring (65,536 messages),
every message received and in flight for 10 minutes, with that many long
polls (RECEIVE, wait 20 s) parked on it, spread over that many of its
partitions (0 polls: one push subscription, prefetch 10, on every
partition instead); `busy` gets `send_batch` of 100 x 100 B
from one producer thread, flat out, for a few seconds without the polls,
then as long again with them parked. The ratio is the share of its send
rate the busy queue keeps while the polls wait.

{table(["parked polls", "partitions", "host tree", "busy queue alone (msg/s)",
        "with the polls parked (msg/s)", "ratio", "runs"], summary)}

The first host tree is the one the benchmark ran from; another is a
snapshot of that commit (`git archive <commit> | tar -x -C <dir>`) whose
code the host processes run, with the first tree's client.

Every run:

{table(["run", "parked polls", "partitions", "host tree", "alone (msg/s)", "polls parked (msg/s)", "ratio"],
        per_run)}

In-process costs of the same trees (`python benchmarks/watch_micro.py`,
the best of 5 timings each: a micro-benchmark): one host pass's
`Waiters.serve` with a long poll parked on each of 64 and of 2,000
partitions, nothing receivable, one partition changed in the pass; and
one CANCEL with 64 clients' long polls parked on each of 64 partitions, 63
of each client's cancelled (what a client does when one partition answers).

{table(["host tree", "pass, 64 partitions (us)", "pass, 2,000 partitions (us)", "CANCEL, 64 x 64 polls (us)"],
        [[t, f"{m['due_64_us']:.2f}", f"{m['due_2000_us']:.2f}", f"{m['cancel_64x64_us']:.2f}"]
         for t, m in micro.items()])}

Since the twenty-fourth session due timers come off a heap (the pass
walked every watched partition for them, and again for the next wake-up),
the parked polls are counted as they come and go (the pass recounted
them), and a CANCEL looks up its poll by (client, request id) (it scanned
every parked poll).

Before the twenty-third session a host pass (each batch of requests it
reads) looked at every partition with parked polls (~2-5 us each, 64 of
them a third of a busy host's time; now only at those that changed or
whose timer is due, see `Waiters`), asked each when its next message
becomes visible (a scan of the whole ring, O(ring slots), about 0.3 ms at
65,536; now answered from the last scan while the ring is unchanged, see
`select.next_wakeup`), and looked through every parked poll for a
deadline that had passed (O(polls); now only once the partition's earliest
deadline passed).
""")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1,2000,64x64,0x64",
                    help="comma-separated: P (polls on one partition) or PxN (P polls over N partitions); "
                         "P 0: one push subscription (prefetch 10) instead")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per phase (each run: two)")
    ap.add_argument("--runs", type=_args.runs, default=3, help="runs per host tree")
    ap.add_argument("--host-tree", action="append", default=[], metavar="LABEL=PATH",
                    help="also run the hosts from this source tree (runs alternate between trees)")
    ap.add_argument("--write", action="store_true", help="write docs/perf/parked.md")
    args = ap.parse_args(argv)
    if not 0 < args.duration <= 8:
        ap.error("--duration must be 0-8 s (the polls wait 20 s)")
    trees = host_trees(ap, args.host_tree)
    try:
        cases = [(int(c.partition("x")[0]), int(c.partition("x")[2] or 1)) for c in args.cases.split(",")]
    except ValueError:
        ap.error(f"--cases {args.cases!r}: expected P or PxN, separated by commas")
    if not all(0 <= p <= 10_000 and 1 <= n <= 64 for p, n in cases):
        ap.error("--cases: polls 0-10000 (0: a push subscription), partitions 1-64")
    micro = {label: micro_of(path) for label, path in trees}  # (first: quick, and fails early)
    rows = []
    for _ in range(args.runs):
        for polls, parts in cases:
            for label, path in trees:
                row = {"tree": label, **one_run(polls, args.duration, path, parts)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    for polls, parts in cases:
        for label, _ in trees:
            mine = [r for r in rows if (r["tree"], r["polls"], r["partitions"]) == (label, polls, parts)]
            med = {k: statistics.median(r[k] for r in mine)
                   for k in ("alone_msgs_per_s", "parked_msgs_per_s", "ratio")}
            print(f"{label}: {polls} polls over {parts} partition(s): busy queue alone "
                  f"{med['alone_msgs_per_s']:,.0f} msg/s, with the polls parked "
                  f"{med['parked_msgs_per_s']:,.0f} msg/s ({med['ratio']:.2f}x; medians of {len(mine)})")
    for label, m in micro.items():
        print(f"{label}: per pass {m['due_64_us']:.2f} us with a poll on 64 partitions, "
              f"{m['due_2000_us']:.2f} us on 2000; {m['cancel_64x64_us']:.2f} us per CANCEL "
              "(64 x 64 polls)")
    if args.write:
        given = argv if argv is not None else sys.argv[1:]
        write_doc(rows, micro, " ".join(["python -m benchmarks.parked", *given]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
