"""The queue benchmark of the "Queues" issue: one client thread against one
host, 100-byte messages, measured beside raw pyzmq in the same run.

- ``send_batch``: batches of ``batch`` messages, one request outstanding
  (the client is synchronous); messages/s.
- ``receive_delete``: ``receive(batch)`` then ``delete_batch`` of what came
  back, until the queue is empty; messages/s.
- ``send_single``: one ``send`` at a time; round-trip p50/p99/p99.9.

The raw pyzmq figures come from :mod:`zmqueue.bench.ceiling` with the same
size, batch and one request in flight, so the ratio compares like with like.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

import zmqueue
from zmqueue.bench import ceiling
from zmqueue.bench.stats import percentiles_ms

DRAIN_TIMEOUT_S = 120.0


def measure_queue(client: zmqueue.Client, size: int = 100, batch: int = 100,
                  duration_s: float = 3.0, single_count: int = 3000,
                  fsync: str = "interval") -> dict[str, float]:
    name = f"bench-ops-{uuid.uuid4().hex[:8]}"
    q = client.create_queue(name, fsync=fsync)
    try:
        return _measure(q, size, batch, duration_s, single_count)
    finally:
        client.delete_queue(name)


def _measure(q: zmqueue.Queue, size: int, batch: int, duration_s: float,
             single_count: int) -> dict[str, float]:
    body = bytes(size)
    bodies = [body] * batch
    q.send_batch(bodies)  # warm up connections and routes
    sent = batch
    t0 = time.perf_counter()
    deadline = t0 + duration_s
    while time.perf_counter() < deadline:
        q.send_batch(bodies)
        sent += batch
    send_rate = (sent - batch) / (time.perf_counter() - t0)

    got = 0
    t0 = time.perf_counter()
    stop_at = t0 + DRAIN_TIMEOUT_S
    while got < sent and time.perf_counter() < stop_at:
        msgs = q.receive(batch, wait_time=0.5 if got else 2)
        if not msgs:
            continue
        q.delete_batch([m.receipt for m in msgs])
        got += len(msgs)
    recv_rate = got / (time.perf_counter() - t0)

    lat = np.empty(single_count, dtype=np.float64)
    for i in range(-100, single_count):
        t = time.perf_counter()
        q.send(body)
        if i >= 0:
            lat[i] = time.perf_counter() - t
    pct = percentiles_ms(lat)
    q.purge()
    return {
        "send_batch_msgs_per_s": send_rate,
        "receive_delete_msgs_per_s": recv_rate,
        "received": float(got), "sent": float(sent),
        "send_single_p50_ms": pct["p50"], "send_single_p99_ms": pct["p99"],
        "send_single_p99.9_ms": pct["p99.9"],
    }


def measure_side_by_side(client: zmqueue.Client, size: int = 100, batch: int = 100,
                         duration_s: float = 3.0, single_count: int = 3000,
                         fsync: str = "interval") -> dict[str, Any]:
    """One run: raw pyzmq, then zmqueue, then the ratios."""
    raw = ceiling.measure(size, batch, duration_s, single_count)
    zq = measure_queue(client, size, batch, duration_s, single_count, fsync)
    out: dict[str, Any] = {"size": size, "batch": batch, "fsync": fsync}
    out.update({f"raw.{k}": v for k, v in raw.items()})
    out.update({f"zmqueue.{k}": v for k, v in zq.items()})
    out["ratio.send_batch_vs_raw"] = (zq["send_batch_msgs_per_s"]
                                      / raw["dealer_router_batched_sync_payloads_per_s"])
    out["ratio.receive_delete_vs_raw"] = (zq["receive_delete_msgs_per_s"]
                                          / raw["dealer_router_batched_sync_payloads_per_s"])
    out["ratio.send_single_p99_vs_raw"] = zq["send_single_p99_ms"] / raw["dealer_router_single_p99_ms"]
    return out
