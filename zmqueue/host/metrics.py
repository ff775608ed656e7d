"""Prometheus metrics of one host, collected at scrape time.

The data plane keeps plain counters (the front door's per-queue counters and
latency buckets, the dispatcher's and replicator's counters, the DLQ mover's
moves); :class:`HostCollector` copies them, with per-queue gauges read from
the stores, on the request-loop thread (``run_on_loop``) so a scrape never
races the loop, then turns them into metric families. Gauges count the
streams this host writes (each stream is written by one host, so summing a
queue's gauges over hosts gives the queue's totals).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import disk_free
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.waiting import MAX_WAITERS
from zmqueue.security.frontdoor import LATENCY_BUCKETS_S, FrontDoor, Latency

GAUGES = (("visible", "messages visible"), ("in_flight", "messages received and not yet deleted"),
          ("delayed", "messages not yet visible (delay)"), ("total", "messages stored"),
          ("blocked_on_disk", "visible messages on disk no receive can reach now (ring at its cap)"),
          ("dead_letters_waiting", "dead letters not yet moved to the dead-letter queue (held while it is "
                                   "missing or of the other type)"))
QUEUE_COUNTERS = (("sends", "messages sent"), ("receives", "messages delivered by receive"),
                  ("deletes", "messages deleted"), ("redeliveries", "deliveries with receive count > 1"),
                  ("bytes_in", "request bytes"), ("bytes_out", "reply bytes"),
                  ("throttled", "requests refused with Throttled"),
                  ("denied", "requests refused with AccessDenied"))


def snapshot(svc: QueueService, door: FrontDoor, zap_counters: dict[str, int],
             dispatcher_counters: dict[str, int]) -> dict[str, Any]:
    """Everything a scrape needs; call on the loop thread."""
    now = int(time.time() * 1000)
    queues: dict[str, dict[str, int]] = {}
    lag: dict[str, int] = {}
    for key, st in svc.set.streams.items():
        if st.role is not Role.WRITER:
            continue
        q = queues.setdefault(key[0], {})
        for k, v in st.store.stats(now).items():
            q[k] = max(q.get(k, 0), v) if k == "oldest_age_ms" else q.get(k, 0) + v
        behind = [st.store.last_seq - p for n, p in st.follower_pos.items() if n in st.replicas]
        lag["/".join(map(str, key))] = max(behind) if behind else 0
    counters = {q: c.as_dict() for q, c in door.queues.items()}
    for name, n in svc.pusher.redelivered.items():  # pushes are not requests: the door never sees them
        if name in counters:
            counters[name]["redeliveries"] += n
    return {"queues": queues, "lag": lag, "counters": counters,
            "latency": _copy(door.latency), "commit": _copy(door.commit),
            "dlq": dict(svc.dlq.moved), "pushed": dict(svc.pusher.pushed), "zap": dict(zap_counters),
            "dispatcher": _with_late(dispatcher_counters, svc.waiters.watch.late, svc.pusher.watch.late),
            "replication": {**svc.replicator.counters,
                            "refused_replies": svc.forwarder.refused_replies},
            "disk": (disk_free(svc.set.root.parent), svc.set.defaults.min_free_bytes),
            "recovery": (svc.set.recovered.corrupt_blocks, svc.set.recovered.truncated_bytes),
            "unopened": len(svc.set.failed), "parked": svc.waiters.total}


DISPATCHER_EVENTS = ("requests", "errors", "internal_errors", "malformed", "unexpected_reply",
                     "retries_answered_from_cache", "retries_joined_in_progress", "request_ids_reused",
                     "pass_errors",
                     "polls_served_late", "pushes_served_late")
"""Dispatcher events exported from the start, at 0 (an alert on one that
should stay 0 can tell 0 from not exported); others appear once counted."""


def _with_late(counters: dict[str, int], polls: int, pushes: int) -> dict[str, int]:
    """The dispatcher's counters, and the parked polls and pushes a recheck
    had to serve (a change that reached none of the paths that wake them,
    see zmqueue.dataplane.partwatch); every one of :data:`DISPATCHER_EVENTS`."""
    return {**dict.fromkeys(DISPATCHER_EVENTS, 0), **counters, "polls_served_late": polls,
            "pushes_served_late": pushes}


def _copy(h: Latency) -> dict[str, tuple[list[int], float]]:
    return {k: (list(v), h.sums[k]) for k, v in h.counts.items()}


def _histogram(name: str, doc: str, data: dict[str, tuple[list[int], float]], label: str
               ) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=[label])
    for key, (counts, total) in sorted(data.items()):
        buckets, acc = [], 0
        for bound, n in zip([*map(str, LATENCY_BUCKETS_S), "+Inf"], counts, strict=True):
            acc += n
            buckets.append((bound, acc))
        fam.add_metric([key], buckets, total)
    return fam


class HostCollector(Collector):
    def __init__(self, run_on_loop: Callable[[], dict[str, Any] | None]) -> None:
        self.run_on_loop = run_on_loop

    def collect(self) -> Iterator[Any]:
        snap = self.run_on_loop()
        if snap is None:
            return
        for name, doc in GAUGES:
            g = GaugeMetricFamily(f"zmqueue_queue_{name}", doc, labels=["queue"])
            for q, vals in sorted(snap["queues"].items()):
                g.add_metric([q], vals.get(name, 0))
            yield g
        g = GaugeMetricFamily("zmqueue_queue_oldest_age_seconds", "age of the oldest message",
                              labels=["queue"])
        for q, vals in sorted(snap["queues"].items()):
            g.add_metric([q], vals.get("oldest_age_ms", 0) / 1000)
        yield g
        for name, doc in QUEUE_COUNTERS:
            c = CounterMetricFamily(f"zmqueue_queue_{name}", doc, labels=["queue"])
            for q, vals in sorted(snap["counters"].items()):
                c.add_metric([q], vals[name])
            yield c
        for name, doc, key in (("dlq_moves", "messages moved to the dead-letter queue", "dlq"),
                               ("pushed", "messages pushed to subscriptions", "pushed")):
            c = CounterMetricFamily(f"zmqueue_queue_{name}", doc, labels=["queue"])
            for q, n in sorted(snap[key].items()):
                c.add_metric([q], n)
            yield c
        free, reserve = snap["disk"]
        yield GaugeMetricFamily("zmqueue_disk_free_bytes",
                                "free bytes on the disk of the host's data directory", value=free)
        yield GaugeMetricFamily("zmqueue_disk_min_free_bytes", "the reserve (--min-free-disk-mb): "
                                "below it new messages are refused (DISK_FULL)", value=reserve)
        corrupt, cut = snap["recovery"]
        yield CounterMetricFamily("zmqueue_recovery_corrupt_blocks", "bad blocks (checksum, torn "
                                  "write, seq gap) the recovery scans of the streams this host opened "
                                  "found: each cut its stream's log there", value=corrupt)
        yield CounterMetricFamily("zmqueue_recovery_truncated_bytes", "bytes of segment files those "
                                  "recovery scans cut (a bad block and everything after it)", value=cut)
        yield GaugeMetricFamily("zmqueue_streams_unopened", "streams this host should keep whose files "
                                "failed to open (no space, a stray file, out of file descriptors): "
                                "retried every few seconds, their requests refused with the cause",
                                value=snap["unopened"])
        yield GaugeMetricFamily("zmqueue_parked_polls", "long polls (receives with wait_time) waiting "
                                f"on this host for a message; at {MAX_WAITERS} more are answered empty "
                                "at once", value=snap["parked"])
        g = GaugeMetricFamily("zmqueue_replication_lag_records",
                              "records the slowest replica is behind the writer", labels=["stream"])
        for s, n in sorted(snap["lag"].items()):
            g.add_metric([s], n)
        yield g
        yield _histogram("zmqueue_request_latency_seconds", "request latency on the host (receipt "
                         "to reply, including long-poll waits)", snap["latency"], "command")
        yield _histogram("zmqueue_commit_seconds", "group commit duration (write + fsync per policy)",
                         snap["commit"], "phase")
        for group in ("zap", "dispatcher", "replication"):
            c = CounterMetricFamily(f"zmqueue_{group}_events", f"{group} event counters", labels=["event"])
            for k, n in sorted(snap[group].items()):
                c.add_metric([k], n)
            yield c


def on_loop(post: Callable[[Callable[[], None]], None], build: Callable[[], dict[str, Any]],
            timeout_s: float = 2.0) -> dict[str, Any] | None:
    """Run ``build`` on the loop thread (through ``post``); None if the loop
    does not get to it within ``timeout_s`` (a stalled loop: /health says so)."""
    import threading

    box: dict[str, dict[str, Any]] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["s"] = build()
        finally:
            done.set()

    post(work)
    return box.get("s") if done.wait(timeout_s) else None
