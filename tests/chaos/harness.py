"""Chaos harness: sustained send/receive/delete traffic against real host
processes while seeded faults hit them (SIGKILL, SIGSTOP/SIGCONT, restarts on
the old data dirs), then invariant checks.

Everything is bounded: message count, scenario wall time, every wait has a
deadline, and every process is stopped by pid at the end. A scenario is
replayable from its seed (``ZMQUEUE_CHAOS_SEED`` or the ``seed`` field); the
seed is printed with the report.
"""

from __future__ import annotations

import bisect
import json
import random
import shutil
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import consul

import zmqueue
from tests.helpers import Cuttable
from zmqueue.client.receipts import Deletable
from zmqueue.localcluster import ConsulAgent, HostProcess

STALL_WINDOW_S = 20.0
"""How long after a fault ``Report.stalls`` looks for the producer's longest stall."""

FAULTS = ("kill_writer", "kill_follower", "kill_random", "kill_two", "freeze_writer", "drain_writer",
          "cut_consul_writer", "wipe_writer")
"""``drain_writer``: an operator drains the writer's host (KV), which stays up; with a
spare host (``hosts_per_cluster=4``) the manager moves the partition's replica off it.
``cut_consul_writer``: the writer's host alone loses Consul for ``freeze_s`` (every host
reaches Consul through a TCP forwarder, ``tests.helpers.Cuttable``); its lock is released
and another host elected while it still serves: nothing it acknowledged may be lost, in
async mode too.
``wipe_writer``: the writer's host is killed, its data directory removed (a lost disk),
and it comes back empty under the same node id: nothing a quorum acknowledged may be lost
(with a majority quorum the others hold it; with ``sync_quorum="all"`` too), and the
empty host must not lead before it has caught up."""


@dataclass(frozen=True)
class Scenario:
    name: str
    fifo: bool
    sync: bool
    fault: str
    seed: int
    messages: int = 300
    groups: int = 4
    clusters: int = 1
    hosts_per_cluster: int = 3
    restart: bool = True
    freeze_s: float = 5.0
    time_limit_s: float = 75.0
    carry_deletes: bool = False
    """The consumer hands each batch back to ``delete_and_receive`` (deletes
    riding on the next receive: by reference for a standard queue's plain
    messages, as receipts on FIFO) instead of ``receive`` + ``delete_batch``."""
    consumer: str = "pull"
    """``pull``: a thread receiving (long polls); ``push``: a subscription
    (``auto_delete=False``) whose handler deletes each message and records
    the outcome; it must follow the writer through the faults; ``pipeline``:
    ``Queue.receive_pipeline`` (two RECEIVEs in flight, the deletes riding on
    them, their outcomes heard through ``on_deleted``)."""
    producer: str = "single"
    """``single``: one ``send`` at a time; ``pipeline``: ``Queue.pipeline``
    with up to 8 sends in flight, a failed one sent again (FIFO: in order,
    before any later one, with its dedup id)."""
    sync_quorum: str = "majority"
    """``all``: every voter must hold a synchronous write (no write goes
    through while a host is down, so a killed host is restarted without
    waiting for an acknowledgement after the kill)."""
    request_timeout_s: float = 1.5
    """The client's request timeout. With a long one (>= 10 s) the run fails
    if any send waited it out: a killed host's requests must fail over when
    its connections drop, a frozen one's when its heartbeats stop."""


@dataclass
class Report:
    scenario: Scenario
    acked: dict[int, str] = field(default_factory=dict)
    deliveries: list[tuple[str, int, float]] = field(default_factory=list)
    deleted_at: dict[str, float] = field(default_factory=dict)
    send_errors: int = 0
    faults: list[tuple[float, str, str]] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    """When each send was acknowledged (monotonic), in order."""
    problems: list[str] = field(default_factory=list)
    duplicates: int = 0
    stored_twice: int = 0
    """Extra ids one message number was delivered under: a send stored again
    (a retry that no host recognised, or this harness sending again after
    an error), as opposed to a redelivery of the same id."""
    redelivered_undeleted: int = 0
    lost: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0
    final_writers: dict[str, str] = field(default_factory=dict)
    delete_unknown: set[str] = field(default_factory=set)
    delete_errors: list[str] = field(default_factory=list)
    resubscribed: int = 0
    pipeline_retried: int = 0
    max_send_s: float = 0.0
    """The longest a send took to be acknowledged, retries included."""
    last_ack_s: float = 0.0
    """When the last send was acknowledged (from the start)."""

    def stalls(self) -> list[float]:
        """Per fault (a kill, freeze, cut or drain): the longest time within
        ``STALL_WINDOW_S`` after it that no send was acknowledged, counted from
        the fault itself, i.e. how long the producer stood still however the
        fault ended (a frozen or cut-off writer counts from the freeze or cut,
        not from its end); faults after the last acknowledgement are skipped."""
        out = []
        acks = self.ack_times
        for at, what, _ in self.faults:
            if what not in ("kill", "freeze", "cut", "drain"):
                continue
            i = bisect.bisect_right(acks, at)
            if i == len(acks):
                continue
            prev, longest = at, 0.0
            for a in acks[i:]:
                if prev > at + STALL_WINDOW_S:
                    break
                longest = max(longest, a - prev)
                prev = a
            out.append(longest)
        return out

    def summary(self) -> dict[str, Any]:
        s = self.scenario
        return {"scenario": s.name, "seed": s.seed, "fifo": s.fifo, "sync": s.sync,
                "sync_quorum": s.sync_quorum, "fault": s.fault,
                "acked": len(self.acked), "delivered_unique": len({d[0] for d in self.deliveries}),
                "lost": len(self.lost), "duplicates": self.duplicates, "stored_twice": self.stored_twice,
                "redelivered_after_unacked_delete": self.redelivered_undeleted,
                "send_errors": self.send_errors, "faults": [f[1] + ":" + f[2] for f in self.faults],
                "failover_s": [round(x, 2) for x in self.stalls()],
                "undeleted": len({d[0] for d in self.deliveries} - set(self.deleted_at)),
                "delete_outcome_unknown": len(self.delete_unknown),
                "delete_errors": self.delete_errors[:5],
                "final_writers": self.final_writers, "consumer": s.consumer,
                "resubscribed": self.resubscribed, "producer": s.producer,
                "pipeline_retried": self.pipeline_retried, "max_send_s": round(self.max_send_s, 2),
                "request_timeout_s": s.request_timeout_s,
                "problems": self.problems, "elapsed_s": round(self.elapsed_s, 1),
                "last_ack_s": round(self.last_ack_s, 1)}


class ChaosRun:
    def __init__(self, scenario: Scenario, agent: ConsulAgent, work: Path) -> None:
        self.s = scenario
        self.agent = agent
        self.work = work
        self.rng = random.Random(scenario.seed)
        self.hosts: list[HostProcess] = []
        self.dead: list[HostProcess] = []
        self.report = Report(scenario)
        self.queue_name = f"chaos-{scenario.seed}" + (".fifo" if scenario.fifo else "")
        self.stop = threading.Event()
        self.producer_done = threading.Event()
        self.last_ack = 0.0
        self.lock = threading.Lock()
        self.send_target: str | None = None
        """The node a pipelined producer sends to (its writer is the one killed)."""
        self.forwarders: dict[str, Cuttable] = {}
        """Per node, its way to Consul (``cut_consul_writer`` scenarios only)."""

    # --- cluster ------------------------------------------------------------
    def start_hosts(self) -> None:
        uid = f"{self.s.seed}"
        for c in range(self.s.clusters):
            for h in range(self.s.hosts_per_cluster):
                node = f"x{uid}-c{c}h{h}"
                consul_addr = self.agent.http_addr
                if self.s.fault == "cut_consul_writer":
                    self.forwarders[node] = Cuttable(consul_addr)
                    consul_addr = self.forwarders[node].addr
                hp = HostProcess(f"chaos{uid}-c{c}", node, self.work / "data" / node,
                                 consul_addr, self.work / "logs")
                self.hosts.append(hp.start())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(self.passing()) == len(self.hosts):
                return
            time.sleep(0.1)
        raise AssertionError("hosts did not all pass their checks within 60 s")

    def kv(self) -> consul.Consul:
        host, _, port = self.agent.http_addr.rpartition(":")
        return consul.Consul(host=host, port=int(port), connections_timeout=3)

    def passing(self) -> set[str]:
        _, entries = self.kv().health.service("zmqueue", passing=True)
        return {e["Service"]["Meta"].get("node", "") for e in entries}

    def writers(self) -> dict[str, str]:
        _, items = self.kv().kv.get(f"zmqueue/leaders/{self.queue_name}/0/", recurse=True)
        return {i["Key"].rsplit("/", 1)[1]: json.loads(i["Value"])["node"]
                for i in items or [] if i.get("Session") and i.get("Value")}

    def replicas(self) -> list[str]:
        _, item = self.kv().kv.get(f"zmqueue/queues/{self.queue_name}/partitions/0")
        return list(json.loads(item["Value"])["replicas"]) if item else []

    def stop_all(self) -> None:
        """Stop every host by pid; a host that had exited by itself (not
        killed by a fault) is a problem of the run: a host must never crash."""
        for h in self.hosts:
            h.stop()
        for f in self.forwarders.values():
            f.close()
        for h in self.hosts:
            if h.died():
                tail = h.log_tail(600).strip().splitlines()[-3:]
                self.report.problems.append(f"host {h.node} died by itself ({h.ending()}): "
                                            f"{' | '.join(tail)}")

    # --- traffic --------------------------------------------------------------
    def produce(self, q: zmqueue.Queue) -> None:
        try:
            for i in range(self.s.messages):
                if self.stop.is_set():
                    return
                group = f"g{i % self.s.groups}" if self.s.fifo else None
                dedup = f"m{i}" if self.s.fifo else None
                while not self.stop.is_set():
                    started = time.monotonic()
                    try:
                        mid = q.send(f"{i}".encode(), group_id=group, dedup_id=dedup)
                    except zmqueue.ZmqueueError:
                        self.report.send_errors += 1
                        time.sleep(0.05)
                        continue
                    with self.lock:
                        self.report.acked[i] = mid
                        self.last_ack = time.monotonic()
                        self.report.ack_times.append(self.last_ack)
                        self.report.max_send_s = max(self.report.max_send_s, self.last_ack - started)
                    break
                time.sleep(0.01)
        finally:
            self.producer_done.set()

    def produce_pipelined(self, q: zmqueue.Queue) -> None:
        """Each message's send is in flight while the next ones go out; one
        that fails for good (after the pipeline's retries) is sent again. On
        a FIFO queue the pipeline fails the sends after a failed one too, and
        they all go again, in order, before any new one."""
        todo = deque(range(self.s.messages))
        number_of: dict[int, int] = {}  # pipeline index -> message number
        failed: list[int] = []

        def settled(p: zmqueue.PendingSend) -> None:
            i = number_of.pop(p.index)
            with self.lock:
                if p.id is not None:
                    self.report.acked[i] = p.id
                    self.last_ack = time.monotonic()
                    self.report.ack_times.append(self.last_ack)
                    self.report.max_send_s = max(self.report.max_send_s, p.done_at - p.sent_at)
                else:
                    self.report.send_errors += 1
                    failed.append(i)

        eps = q.routes.for_send(0)
        self.send_target = next((n for n, ep in q.routes.part(0).endpoints.items() if eps and ep == eps[0]),
                                None)  # kill_writer then kills the host the pipeline sends to
        pipe = q.pipeline(window=8, on_done=settled)
        sent = 0
        try:
            while (todo or number_of or failed) and not self.stop.is_set():
                if failed:
                    if self.s.fifo:
                        pipe.flush()  # (ends the failure's hold; later sends failed unsent)
                        todo.extendleft(sorted(failed, reverse=True))
                    else:
                        todo.extend(failed)
                    failed.clear()
                    continue
                if not todo:
                    pipe.flush()
                    continue
                i = todo.popleft()
                number_of[sent] = i  # (on_done may run before send returns)
                group = f"g{i % self.s.groups}" if self.s.fifo else None
                dedup = f"m{i}" if self.s.fifo else None
                assert pipe.send(f"{i}".encode(), group_id=group, dedup_id=dedup).index == sent
                sent += 1
                time.sleep(0.01)
        finally:
            self.report.pipeline_retried = pipe.retried
            pipe.close()
            self.producer_done.set()

    def consume(self, q: zmqueue.Queue) -> None:
        carried: list[zmqueue.Message] = []  # handled, deleted with the next receive (carry_deletes)
        while not self.stop.is_set():
            try:
                if self.s.carry_deletes:
                    outcomes, msgs = q.delete_and_receive(carried, max_messages=10, wait_time=1)
                else:
                    outcomes, msgs = [], q.receive(max_messages=10, wait_time=1)
            except zmqueue.ZmqueueError:
                # the carried deletes' outcome is unknown (see below); messages
                # the receive took come back after their visibility timeout
                with self.lock:
                    self.report.delete_unknown.update(m.id for m in carried)
                carried = []
                time.sleep(0.05)
                continue
            now = time.monotonic()
            with self.lock:
                self._settle(carried, outcomes, now)
                self.report.deliveries += [(m.id, int(m.body), now) for m in msgs]
            carried = []
            if not msgs:
                continue
            if self.s.carry_deletes:
                carried = msgs
                continue
            try:
                outcomes = q.delete_batch([m.receipt for m in msgs])
            except zmqueue.ZmqueueError:
                # outcome unknown (the writer died mid-request): applied or not,
                # the message is either gone or comes back after its timeout
                with self.lock:
                    self.report.delete_unknown.update(m.id for m in msgs)
                continue
            done = time.monotonic()
            with self.lock:
                self._settle(msgs, outcomes, done)

    def consume_pipeline(self, q: zmqueue.Queue) -> None:
        def deleted(items: list[Deletable], errors: list[zmqueue.ZmqueueError | None]
                    ) -> None:
            now = time.monotonic()
            msgs = [m for m in items if isinstance(m, zmqueue.Message)]
            with self.lock:
                # a host's per-message answer is an InvalidReceipt; any other
                # error is the request's (no answer): the outcome is unknown
                unknown = {m.id for m, e in zip(msgs, errors, strict=True)
                           if e is not None and not isinstance(e, zmqueue.InvalidReceipt)}
                self.report.delete_unknown |= unknown
                self._settle([m for m in msgs if m.id not in unknown],
                             [e for m, e in zip(msgs, errors, strict=True) if m.id not in unknown], now)

        with q.receive_pipeline(max_messages=10, wait_time=1, in_flight=2, on_deleted=deleted) as pipe:
            while not self.stop.is_set():
                try:
                    msgs = pipe.receive()
                except zmqueue.ZmqueueError:
                    time.sleep(0.05)  # the pending deletes stay in the pipeline: they go next time
                    continue
                now = time.monotonic()
                with self.lock:
                    self.report.deliveries += [(m.id, int(m.body), now) for m in msgs]
                pipe.delete(msgs)

    def consume_push(self, q: zmqueue.Queue) -> None:
        def handle(m: zmqueue.Message) -> None:
            with self.lock:
                self.report.deliveries.append((m.id, int(m.body), time.monotonic()))
            try:
                outcomes = q.delete_batch([m.receipt])
            except zmqueue.ZmqueueError:
                with self.lock:
                    self.report.delete_unknown.add(m.id)
                return
            done = time.monotonic()
            with self.lock:
                self._settle([m], outcomes, done)

        with q.subscribe(handle, prefetch=10, auto_delete=False) as sub:
            self.stop.wait()
        self.report.resubscribed = sub.resubscribed

    def _settle(self, msgs: list[zmqueue.Message], outcomes: list[zmqueue.ZmqueueError | None],
                at: float) -> None:
        """Record confirmed delete outcomes (the caller holds the lock)."""
        for m, err in zip(msgs, outcomes, strict=True):
            if err is None:
                self.report.deleted_at.setdefault(m.id, at)
            else:
                self.report.delete_errors.append(f"{int(m.body)}:{type(err).__name__}:{err}")

    # --- faults ------------------------------------------------------------------
    def pick(self, kind: str) -> list[HostProcess]:
        alive = [h for h in self.hosts if h.alive() and h not in self.dead]
        writers = set(self.writers().values())
        replicas = set(self.replicas())
        cand_w = [h for h in alive if h.node in writers] or alive
        if self.send_target is not None:
            cand_w = [h for h in cand_w if h.node == self.send_target] or cand_w
        cand_f = [h for h in alive if h.node in replicas and h.node not in writers] or alive
        if kind in ("kill_writer", "freeze_writer", "drain_writer", "cut_consul_writer", "wipe_writer"):
            return [self.rng.choice(cand_w)]
        if kind == "kill_follower":
            return [self.rng.choice(cand_f)]
        if kind == "kill_two":
            in_set = [h for h in alive if h.node in replicas] or alive
            return self.rng.sample(in_set, min(2, len(in_set) - 1)) if len(in_set) > 1 else []
        return [self.rng.choice([h for h in alive if h.node in replicas] or alive)]

    def inject(self) -> None:
        time.sleep(self.rng.uniform(1.0, 2.5))
        kind = self.s.fault
        victims = self.pick(kind)
        for n, h in enumerate(victims):
            at = time.monotonic()
            if kind == "drain_writer":
                self.report.faults.append((at, "drain", h.node))
                self.kv().kv.put(f"zmqueue/hosts/{h.node}/drain", "true")
            elif kind == "cut_consul_writer":
                self.report.faults.append((at, "cut", h.node))
                self.forwarders[h.node].cut()
                self.stop.wait(self.s.freeze_s)
                self.forwarders[h.node].heal()
                self.report.faults.append((time.monotonic(), "heal", h.node))
            elif kind == "freeze_writer":
                self.report.faults.append((at, "freeze", h.node))
                h.freeze()
                self.stop.wait(self.s.freeze_s)
                h.thaw()
            else:
                self.report.faults.append((at, "kill", h.node))
                h.kill9()
                if kind == "wipe_writer":
                    shutil.rmtree(h.data_dir, ignore_errors=True)
                    self.report.faults.append((time.monotonic(), "wipe", h.node))
                self.dead.append(h)
            # (no write can be acknowledged once a sync quorum is gone: restart instead)
            quorum_gone = self.s.sync and (self.s.sync_quorum == "all"
                                           or (kind == "kill_two" and n + 1 == len(victims)))
            if not quorum_gone:
                self.wait_acked_after(at)
            if n + 1 < len(victims):
                time.sleep(self.rng.uniform(2.0, 4.0))
        if self.s.restart and self.dead:
            time.sleep(self.rng.uniform(1.0, 3.0))
            for h in list(self.dead):
                self.hosts.append(HostProcess(h.cluster, h.node, h.data_dir, h.consul,
                                              self.work / "logs").start())
                self.report.faults.append((time.monotonic(), "restart", h.node))

    def wait_acked_after(self, fault_at: float) -> None:
        """Poll (up to ``STALL_WINDOW_S``) until a send is acknowledged after the
        fault, before the next fault (``Report.stalls`` measures the stall)."""
        deadline = fault_at + STALL_WINDOW_S
        while time.monotonic() < deadline and not self.producer_done.is_set():
            with self.lock:
                if self.last_ack > fault_at:
                    return
            time.sleep(0.02)

    # --- the run -------------------------------------------------------------------
    def run(self) -> Report:
        started = time.monotonic()
        self.start_hosts()
        with zmqueue.connect(self.agent.http_addr, request_timeout=self.s.request_timeout_s,
                             retries=6) as client:
            q = client.create_queue(self.queue_name, fifo=self.s.fifo, replication_factor=3,
                                    sync_quorum=self.s.sync_quorum,
                                    sync_replication=self.s.sync, visibility_timeout=5)
            consume = {"push": self.consume_push, "pipeline": self.consume_pipeline}.get(
                self.s.consumer, self.consume)
            produce = self.produce_pipelined if self.s.producer == "pipeline" else self.produce
            threads = [threading.Thread(target=produce, args=(q,), daemon=True),
                       threading.Thread(target=consume, args=(q,), daemon=True)]
            for t in threads:
                t.start()
            self.inject()
            limit = started + self.s.time_limit_s
            while time.monotonic() < limit and not self._drained():
                time.sleep(0.2)
            self.wait_moved_off(limit)
            self.stop.set()
            for t in threads:
                t.join(timeout=15)
        self.report.elapsed_s = time.monotonic() - started
        self.report.final_writers = self.writers()
        self.report.last_ack_s = self.last_ack - started if self.last_ack else 0.0
        check(self.report)
        return self.report

    def wait_moved_off(self, limit: float) -> None:
        """After a drain: poll (until ``limit``) for the drained hosts to be out of
        the partition's replica set, the change confirmed (no ``previous``);
        a problem if they are not."""
        drained = {node for _, what, node in self.report.faults if what == "drain"}
        if not drained:
            return
        while time.monotonic() < limit:
            _, item = self.kv().kv.get(f"zmqueue/queues/{self.queue_name}/partitions/0")
            a = json.loads(item["Value"]) if item else {}
            if a and not drained & set(a["replicas"]) and not a.get("previous"):
                return
            time.sleep(0.2)
        self.report.problems.append(f"the drained hosts {sorted(drained)} were still replicas "
                                    f"after {self.s.time_limit_s} s")

    def _drained(self) -> bool:
        if not self.producer_done.is_set():
            return False
        with self.lock:
            delivered = {d[0] for d in self.report.deliveries}
            settled = set(self.report.deleted_at) | self.report.delete_unknown
            return set(self.report.acked.values()) <= delivered and delivered <= settled


def check(r: Report) -> None:
    """The invariants; violations go to ``r.problems``."""
    s = r.scenario
    by_id: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for mid, num, at in r.deliveries:
        by_id[mid].append((num, at))
    r.lost = sorted(i for i, mid in r.acked.items() if mid not in by_id)
    if s.request_timeout_s >= 10 and r.max_send_s >= s.request_timeout_s:
        r.problems.append(f"a send took {r.max_send_s:.1f} s: it waited out the {s.request_timeout_s} s "
                          "request timeout although its host was killed (its connection dropped) or "
                          "frozen (its heartbeats stopped)")
    if r.lost and (s.sync or s.fault in ("drain_writer", "cut_consul_writer")):
        # (a drain hands an async stream over; a writer cut off from Consul needs a majority)
        r.problems.append(f"{len(r.lost)} acknowledged sends lost: {r.lost[:10]}")
    ids_of: dict[int, set[str]] = defaultdict(set)
    for mid, num, _ in r.deliveries:
        ids_of[num].add(mid)
    r.stored_twice = sum(len(ids) - 1 for ids in ids_of.values())
    if r.stored_twice and s.fifo and s.sync:  # every FIFO send carries a dedup id (REPLICATION.md)
        r.problems.append(f"{r.stored_twice} FIFO sends stored twice despite their dedup ids")
    for mid, ds in by_id.items():
        if len(ds) > 1:
            r.duplicates += len(ds) - 1
            deleted = r.deleted_at.get(mid)
            late = [at for _, at in ds[1:] if deleted is not None and at > deleted + 0.001]
            if late and s.sync:
                r.problems.append(f"message {ds[0][0]} delivered again after its delete was acknowledged")
            if deleted is None or any(at <= deleted for _, at in ds[1:]):
                r.redelivered_undeleted += 1
    if s.fifo:
        firsts: dict[int, list[int]] = defaultdict(list)
        seen: set[str] = set()
        for mid, num, _ in r.deliveries:
            if mid not in seen:
                seen.add(mid)
                firsts[num % s.groups].append(num)
        for g, nums in firsts.items():
            if nums != sorted(nums):
                r.problems.append(f"group g{g} first deliveries out of order: {nums[:20]}")
