"""The replication benchmark of the "Replication" issue, on a real local cluster.

    python -m benchmarks.replication.bench_replication                # prints JSON + a summary
    python -m benchmarks.replication.bench_replication --write        # also rewrites docs/perf/replication.md

Starts Consul and 3 hosts (``LocalCluster``), then:

1. **Cost of replication.** ``--rounds`` rounds; each round measures a
   standard queue with R=1 and one with R=3 (both ``sync_replication=True``,
   ``fsync=interval``), in alternating order: ``send_batch`` of 100 x 100-byte
   messages in a loop for ``--seconds`` from one producer thread, then from
   ``--producers`` threads sharing the client (the throughput the cluster
   sustains: the R=3 / R=1 target is judged on it), then ``--latency-n``
   single sends (p50 / p99). Medians over rounds, and the R=3 / R=1 ratios.
2. **Failover.** A FIFO queue with R=3 (sync). ``--kills`` times: find the
   writer of ``fifo`` from its Consul lock, SIGKILL it, time kill -> first
   successful ``send(group_id="g", dedup_id=...)`` from a client with
   ``request_timeout=1.5``; then restart the killed host on its data dir and
   wait until it passes its checks and has caught up before the next kill.

Every wait has a deadline; the whole run is bounded by ``--budget-s``
(failover kills stop early when the budget runs out, and the report says so).
Processes are stopped by pid in ``finally``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import zmqueue
from zmqueue.bench.machine import machine_summary
from zmqueue.bench.signals import signals_raise
from zmqueue.bench.stats import median, percentiles_ms
from zmqueue.localcluster import HostProcess, LocalCluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "perf" / "replication.md"
BODY = b"x" * 100
BATCH = 100
FIFO_QUEUE = "bench-failover.fifo"
T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], timeout_s: float, what: str, every_s: float = 0.05) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


# --- part 1: R=1 vs R=3 ------------------------------------------------------------

def ready_queue(client: zmqueue.Client, name: str, replicas: int) -> zmqueue.Queue:
    q = client.create_queue(name, replication_factor=replicas, sync_replication=True,
                            fsync="interval")

    def sent() -> bool:
        try:
            q.send(b"warm-up")
            return True
        except zmqueue.ZmqueueError:
            q.refresh()
            return False

    wait_for(sent, 20, f"a first send to {name}")
    return q


def batched_throughput(q: zmqueue.Queue, seconds: float, producers: int) -> float:
    """msg/s of ``send_batch`` (100 x 100 B) from ``producers`` threads sharing
    the client, each with one batch in flight, for ``seconds``."""
    batch = [BODY] * BATCH
    counts = [0] * producers
    errors: list[BaseException] = []
    end = time.perf_counter() + seconds

    def produce(i: int) -> None:
        try:
            while time.perf_counter() < end:
                q.send_batch(batch)
                counts[i] += BATCH
        except BaseException as exc:  # reported below: a failed send fails the benchmark
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(producers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"a producer failed: {errors[0]!r}")
    return sum(counts) / elapsed


def measure_queue(q: zmqueue.Queue, seconds: float, latency_n: int, producers: int
                  ) -> dict[str, float]:
    batch = [BODY] * BATCH
    for _ in range(20):  # warm the connection and the writer
        q.send_batch(batch)
    one = batched_throughput(q, seconds, 1)
    many = batched_throughput(q, seconds, producers)
    lat: list[float] = []
    for _ in range(latency_n):
        t0 = time.perf_counter()
        q.send(BODY)
        lat.append(time.perf_counter() - t0)
    pct = percentiles_ms(lat)
    return {"send_batch_msgs_per_s": one, "send_batch_many_msgs_per_s": many,
            "send_p50_ms": pct["p50"], "send_p99_ms": pct["p99"]}


def cost_rounds(client: zmqueue.Client, rounds: int, seconds: float, latency_n: int,
                producers: int) -> list[dict[str, Any]]:
    out = []
    for r in range(rounds):
        order = (1, 3) if r % 2 == 0 else (3, 1)
        row: dict[str, Any] = {"round": r + 1, "order": list(order)}
        for replicas in order:
            name = f"bench-repl-r{replicas}-{r + 1}"
            q = ready_queue(client, name, replicas)
            res = measure_queue(q, seconds, latency_n, producers)
            row.update({f"r{replicas}.{k}": v for k, v in res.items()})
            client.delete_queue(name)
            print(json.dumps({"round": r + 1, "R": replicas, **res}), flush=True)
        row["ratio"] = row["r3.send_batch_many_msgs_per_s"] / row["r1.send_batch_many_msgs_per_s"]
        row["ratio_one"] = row["r3.send_batch_msgs_per_s"] / row["r1.send_batch_msgs_per_s"]
        out.append(row)
    return out


# --- part 2: failover ------------------------------------------------------------------

def lock_holder(cluster: LocalCluster, queue: str) -> tuple[str, int] | None:
    item = cluster.consul_client().call(lambda c: c.kv.get(f"zmqueue/leaders/{queue}/0/fifo")[1])
    if not item or not item.get("Session") or not item.get("Value"):
        return None
    return str(json.loads(item["Value"])["node"]), int(item["LockIndex"])


def positions(cluster: LocalCluster, queue: str) -> dict[str, int]:
    items = cluster.consul_client().call(
        lambda c: c.kv.get(f"zmqueue-positions/{queue}/0/fifo/", recurse=True)[1])
    out = {}
    for it in items or []:
        try:
            out[str(it["Key"]).rsplit("/", 1)[1]] = int(json.loads(it["Value"])["seq"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def restart(cluster: LocalCluster, dead: HostProcess) -> HostProcess:
    fresh = HostProcess(dead.cluster, dead.node, dead.data_dir, dead.consul,
                        cluster.work_dir / "logs", dead.extra_args)
    cluster.hosts[cluster.hosts.index(dead)] = fresh.start()
    return fresh


class Sender:
    """Sends FIFO messages with unique dedup ids; remembers what was acked."""

    def __init__(self, q: zmqueue.Queue) -> None:
        self.q = q
        self.n = 0
        self.acked = 0

    def try_send(self) -> bool:
        self.n += 1
        try:
            self.q.send(f"m{self.n}".encode(), group_id="g", dedup_id=f"d{self.n}")
        except zmqueue.ZmqueueError:
            return False
        self.acked += 1
        return True


def one_kill(cluster: LocalCluster, sender: Sender, i: int) -> dict[str, Any]:
    node, epoch = wait_for(lambda: lock_holder(cluster, FIFO_QUEUE), 20, "a FIFO writer")
    victim = cluster.host(node)
    killed_at = time.monotonic()
    victim.kill9()
    tries = 0
    while True:
        tries += 1
        if sender.try_send():
            break
        if time.monotonic() - killed_at > 60:
            raise TimeoutError(f"kill {i}: no send accepted within 60 s of killing {node}")
    failover_s = time.monotonic() - killed_at
    new = lock_holder(cluster, FIFO_QUEUE)
    sample = {"kill": i, "killed": node, "old_epoch": epoch, "failover_s": round(failover_s, 3),
              "new_writer": new[0] if new else None, "new_epoch": new[1] if new else None,
              "send_attempts": tries}
    print(json.dumps(sample), flush=True)
    restart(cluster, victim)
    cluster.wait_passing(30, [node])
    # before the next kill: every replica has what the writer has (published positions)
    for _ in range(5):
        sender.try_send()

    def caught_up() -> bool:
        pos = positions(cluster, FIFO_QUEUE)
        return len(pos) == 3 and len(set(pos.values())) == 1

    try:
        wait_for(caught_up, 15, f"{node} caught up after restart", every_s=0.2)
    except TimeoutError:
        sample["note"] = "restarted host not caught up within 15 s"
    return sample


def failover(cluster: LocalCluster, kills: int, deadline: float) -> dict[str, Any]:
    assert cluster.consul_addr is not None
    with zmqueue.connect(cluster.consul_addr, request_timeout=1.5, retries=4) as client:
        q = client.create_queue(FIFO_QUEUE, fifo=True, replication_factor=3, sync_replication=True)
        sender = Sender(q)
        wait_for(sender.try_send, 20, "a first FIFO send")
        samples = []
        stopped_early = False
        for i in range(1, kills + 1):
            if time.monotonic() > deadline:
                stopped_early = True
                break
            samples.append(one_kill(cluster, sender, i))
        order_ok = check_order(q, sender.acked)
    return {"samples": samples, "stopped_early": stopped_early, "acked": sender.acked,
            "drain": order_ok}


def check_order(q: zmqueue.Queue, acked: int) -> dict[str, Any]:
    """Drain the FIFO queue: every acked send once, in order (a cheap sanity check)."""
    got: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msgs = q.receive(max_messages=100, wait_time=1)
        if not msgs:
            break
        got += [int(m.body[1:]) for m in msgs if m.body.startswith(b"m")]
        q.delete_batch([m.receipt for m in msgs])
    in_order = all(a < b for a, b in itertools.pairwise(got))
    return {"received": len(got), "unique": len(set(got)), "in_order": in_order}


# --- report ----------------------------------------------------------------------------

def summarize(cost: list[dict[str, Any]], fo: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k in cost[0] if k.startswith("r")]
    med = {k: median(r[k] for r in cost) for k in keys if k != "round"}
    fs = sorted(s["failover_s"] for s in fo["samples"])
    return {
        "medians": med,
        "ratio_of_medians": med["r3.send_batch_many_msgs_per_s"] / med["r1.send_batch_many_msgs_per_s"],
        "median_ratio": median(r["ratio"] for r in cost),
        "ratio_one_of_medians": med["r3.send_batch_msgs_per_s"] / med["r1.send_batch_msgs_per_s"],
        "median_ratio_one": median(r["ratio_one"] for r in cost),
        "failover_p50_s": median(fs) if fs else float("nan"),
        "failover_max_s": fs[-1] if fs else float("nan"),
        "failover_n": len(fs),
    }


def machine() -> str:
    return f"{machine_summary()} ({platform.python_implementation()})"


def load() -> str:
    """The 1-minute load average: other work on the machine skews every number."""
    return f"{os.getloadavg()[0]:.1f}"


def write_doc(command: str, cost: list[dict[str, Any]], fo: dict[str, Any], s: dict[str, Any],
              elapsed_s: float, loads: list[str], producers: int, seconds: float) -> None:
    med = s["medians"]
    ratio = s["ratio_of_medians"]
    ok = "met" if ratio >= 0.5 else "**missed**"
    f_ok = "met" if s["failover_p50_s"] <= 3 and s["failover_max_s"] <= 10 and s["failover_n"] >= 20 \
        else "**missed**"
    lines = [
        "# Replication benchmark",
        "",
        "Produced by `benchmarks/replication/bench_replication.py`; numbers below are",
        "from one invocation of the command (each row of the first table is the",
        "median over its rounds). See [REPLICATION.md](../REPLICATION.md) for the",
        "mechanism.",
        "",
        f"- command: `{command}`",
        f"- machine: {machine()}",
        f"- wall time: {elapsed_s:.0f} s; 1-minute load average at start / after part 1 / at end: "
        f"{' / '.join(loads)}",
        "- cluster: Consul dev agent + 3 hosts on 127.0.0.1 (`LocalCluster`), one client",
        "  process; standard queue, 1 partition, 100-byte bodies, `sync_replication=True`,",
        "  `fsync=interval`; R=1 and R=3 queues measured in the same round, alternating",
        "  which goes first.",
        f"- throughput: `send_batch` of 100 messages in a loop for {seconds:g} s, from one",
        "  producer thread (one batch in flight: the rate is 1 / the batch's round trip)",
        f"  and from {producers} producer threads sharing the client ({producers} batches in",
        "  flight: what the cluster sustains). The target is judged on the second, the",
        "  throughput a queue offers; the first is a latency figure and is shown beside it.",
        "",
        "## R=3 beside R=1",
        "",
        "| measurement | R=1 | R=3 | R=3 / R=1 | target |",
        "|---|---:|---:|---:|---|",
        f"| send_batch throughput, {producers} producers (batch 100) | "
        f"{med['r1.send_batch_many_msgs_per_s']:,.0f} msg/s | "
        f"{med['r3.send_batch_many_msgs_per_s']:,.0f} msg/s | {100 * ratio:.1f}% | ≥ 50%: {ok} |",
        f"| send_batch throughput, 1 producer (batch 100) | {med['r1.send_batch_msgs_per_s']:,.0f} msg/s | "
        f"{med['r3.send_batch_msgs_per_s']:,.0f} msg/s | {100 * s['ratio_one_of_medians']:.1f}% | - |",
        f"| single send p50 | {med['r1.send_p50_ms']:.2f} ms | {med['r3.send_p50_ms']:.2f} ms | "
        f"{med['r3.send_p50_ms'] / med['r1.send_p50_ms']:.2f}x | - |",
        f"| single send p99 | {med['r1.send_p99_ms']:.2f} ms | {med['r3.send_p99_ms']:.2f} ms | "
        f"{med['r3.send_p99_ms'] / med['r1.send_p99_ms']:.2f}x | - |",
        "",
        f"Median of the per-round ratios: {100 * s['median_ratio']:.1f}% with {producers} producers, "
        f"{100 * s['median_ratio_one']:.1f}% with 1.",
        "",
        "Rounds (msg/s):",
        "",
        f"| round | order | R=1, {producers} prod. | R=3, {producers} prod. | ratio | R=1, 1 prod. | "
        "R=3, 1 prod. | ratio | R=1 p50 / p99 ms | R=3 p50 / p99 ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in cost:
        lines.append(
            f"| {r['round']} | R={r['order'][0]} first | {r['r1.send_batch_many_msgs_per_s']:,.0f} | "
            f"{r['r3.send_batch_many_msgs_per_s']:,.0f} | {100 * r['ratio']:.1f}% | "
            f"{r['r1.send_batch_msgs_per_s']:,.0f} | {r['r3.send_batch_msgs_per_s']:,.0f} | "
            f"{100 * r['ratio_one']:.1f}% | "
            f"{r['r1.send_p50_ms']:.2f} / {r['r1.send_p99_ms']:.2f} | "
            f"{r['r3.send_p50_ms']:.2f} / {r['r3.send_p99_ms']:.2f} |")
    lines += [
        "",
        "## Failover (FIFO, R=3, sync)",
        "",
        "Time from `SIGKILL` of the `fifo` stream's writer (the node in its Consul lock)",
        "to the first successful `send(group_id=\"g\", dedup_id=...)` from a client with",
        "`request_timeout=1.5`; the killed host is then restarted on its data dir and",
        "the next kill waits until it passes and every replica's published position",
        "is equal.",
        "",
        "| measurement | value | target |",
        "|---|---:|---|",
        f"| kills | {s['failover_n']} | ≥ 20 |",
        f"| failover p50 | {s['failover_p50_s']:.2f} s | ≤ 3 s: {f_ok} |",
        f"| failover max | {s['failover_max_s']:.2f} s | ≤ 10 s |",
        f"| acked sends / drained afterwards (unique, in order) | {fo['acked']} / "
        f"{fo['drain']['received']} ({fo['drain']['unique']}, {fo['drain']['in_order']}) | - |",
        "",
        "Every sample:",
        "",
        "| kill | killed | epoch | new writer | new epoch | failover s | send attempts |",
        "|---:|---|---:|---|---:|---:|---:|",
    ]
    for x in fo["samples"]:
        lines.append(f"| {x['kill']} | {x['killed']} | {x['old_epoch']} | {x['new_writer']} | "
                     f"{x['new_epoch']} | {x['failover_s']:.3f} | {x['send_attempts']} |"
                     + (f" {x['note']}" if x.get("note") else ""))
    if fo["stopped_early"]:
        lines += ["", "The run stopped killing early: its time budget ran out."]
    extra = DOC.read_text().split("<!-- notes -->", 1)[1] if DOC.exists() and \
        "<!-- notes -->" in DOC.read_text() else "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(lines) + "\n\n<!-- notes -->" + extra)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="batched-send window per queue")
    ap.add_argument("--latency-n", type=int, default=500, help="single sends per queue")
    ap.add_argument("--producers", type=int, default=16,
                    help="producer threads for the saturating throughput measurement")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop killing after this")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--write", action="store_true", help="rewrite docs/perf/replication.md")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.replication.bench_replication " + " ".join(sys.argv[1:])
    started = time.monotonic()
    loads = [load()]
    cost: list[dict[str, Any]] = []
    fo: dict[str, Any] = {"samples": [], "stopped_early": False, "acked": 0,
                          "drain": {"received": 0, "unique": 0, "in_order": True}}
    # SIGTERM (e.g. from `timeout`) runs the finally below: the hosts and Consul
    # live in their own sessions and would outlive this process otherwise
    with signals_raise(), tempfile.TemporaryDirectory(prefix="zmq-bench-repl-") as tmp:
        cluster = LocalCluster(Path(tmp), hosts=3)
        try:
            cluster.start()
            assert cluster.consul_addr is not None
            if not args.skip_cost:
                with zmqueue.connect(cluster.consul_addr, request_timeout=10, retries=4) as client:
                    cost = cost_rounds(client, args.rounds, args.seconds, args.latency_n,
                                       args.producers)
            loads.append(load())
            if not args.skip_failover:
                fo = failover(cluster, args.kills, started + args.budget_s)
        finally:
            cluster.stop()
    elapsed = time.monotonic() - started
    loads.append(load())
    if not cost or not fo["samples"]:
        print(json.dumps({"cost": cost, "failover": fo}, default=str))
        return 0
    s = summarize(cost, fo)
    print(json.dumps({"summary": s, "elapsed_s": round(elapsed, 1), "load": loads}, default=str))
    if args.write:
        write_doc(command.strip(), cost, fo, s, elapsed, loads, args.producers, args.seconds)
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
