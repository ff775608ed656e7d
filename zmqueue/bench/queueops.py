"""The queue benchmark of the "Queues" issue: one client thread against one
host, 100-byte messages, measured beside raw pyzmq in the same run.

- ``send_batch``: batches of ``batch`` messages, one request outstanding
  (the client is synchronous); messages/s.
- ``receive_delete``: ``delete_and_receive`` (each batch's deletes ride on
  the next receive of ``batch``), until the queue is empty; messages/s.
- ``receive_pipeline``: the same backlog again, drained through
  ``Queue.receive_pipeline`` (two RECEIVEs in flight); messages/s.
- ``send_single``: one ``send`` at a time; round-trip p50/p99/p99.9.
- ``send_pipelined``: single-message sends through ``Queue.pipeline`` with
  100 in flight (raw pyzmq: 100 single-payload requests in flight); messages/s.
- ``push``: a push subscription (prefetch 10, ``auto_delete``) drains
  ``push_count`` messages; messages/s handled.

The raw pyzmq figures come from :mod:`zmqueue.bench.ceiling` with the same
size, batch and one request in flight, so the ratio compares like with like.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import numpy as np

import zmqueue
from zmqueue.bench import ceiling
from zmqueue.bench.stats import percentiles_ms

DRAIN_TIMEOUT_S = 120.0
PUSH_COUNT = 3000


def measure_queue(client: zmqueue.Client, size: int = 100, batch: int = 100,
                  duration_s: float = 3.0, single_count: int = 3000,
                  fsync: str = "interval") -> dict[str, float]:
    name = f"bench-ops-{uuid.uuid4().hex[:8]}"
    q = client.create_queue(name, fsync=fsync)
    try:
        return _measure(q, size, batch, duration_s, single_count, PUSH_COUNT)
    finally:
        client.delete_queue(name)


def _measure(q: zmqueue.Queue, size: int, batch: int, duration_s: float,
             single_count: int, push_count: int) -> dict[str, float]:
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
    done: list[zmqueue.Message] = []  # deleted by reference, with the next receive
    while got < sent and time.perf_counter() < stop_at:
        errors, msgs = q.delete_and_receive(done, batch, wait_time=0.5 if got else 2)
        if any(errors):
            raise next(e for e in errors if e is not None)
        done = msgs
        got += len(msgs)
    if done:
        q.delete_batch(done)
    recv_rate = got / (time.perf_counter() - t0)
    ahead_rate, ahead_got = _receive_ahead(q, bodies, sent)

    lat = np.empty(single_count, dtype=np.float64)
    for i in range(-100, single_count):
        t = time.perf_counter()
        q.send(body)
        if i >= 0:
            lat[i] = time.perf_counter() - t
    pct = percentiles_ms(lat)
    q.purge()
    pipe_rate = _pipelined(q, body, duration_s)
    q.purge()
    push_rate, pushed = _push_drain(q, bodies, push_count)
    return {
        "send_batch_msgs_per_s": send_rate,
        "receive_delete_msgs_per_s": recv_rate,
        "receive_pipeline_msgs_per_s": ahead_rate, "receive_pipeline_received": float(ahead_got),
        "push_msgs_per_s": push_rate, "push_handled": float(pushed),
        "received": float(got), "sent": float(sent),
        "send_single_p50_ms": pct["p50"], "send_single_p99_ms": pct["p99"],
        "send_single_p99.9_ms": pct["p99.9"],
        "send_pipelined_msgs_per_s": pipe_rate,
    }


def _receive_ahead(q: zmqueue.Queue, bodies: list[bytes], count: int) -> tuple[float, int]:
    """Messages/s of a receive pipeline (two requests in flight, the deletes
    riding on them) draining ``count`` messages sent beforehand, the same
    backlog the ``delete_and_receive`` drain had; and how many it received."""
    for i in range(0, count, len(bodies)):
        q.send_batch(bodies[: min(len(bodies), count - i)])
    got = 0
    t0 = time.perf_counter()
    stop_at = t0 + DRAIN_TIMEOUT_S
    with q.receive_pipeline(len(bodies), wait_time=0.5, in_flight=2) as pipe:
        while got < count and time.perf_counter() < stop_at:
            msgs = pipe.receive()
            pipe.delete(msgs)
            got += len(msgs)
    pipe.raise_failed()
    return got / (time.perf_counter() - t0), got


def _pipelined(q: zmqueue.Queue, body: bytes, duration_s: float) -> float:
    """Messages/s of single sends with ``PIPELINE_WINDOW`` in flight, every one confirmed."""
    window = ceiling.PIPELINE_WINDOW
    sent = 0
    t0 = time.perf_counter()
    with q.pipeline(window) as pipe:
        while time.perf_counter() - t0 < duration_s:
            for _ in range(window):
                pipe.send(body)
            sent += window
    return sent / (time.perf_counter() - t0)


def _push_drain(q: zmqueue.Queue, bodies: list[bytes], count: int) -> tuple[float, int]:
    """Messages/s a push subscription (prefetch 10, auto_delete) handles
    while draining ``count`` messages sent beforehand, and how many it handled."""
    for i in range(0, count, len(bodies)):
        q.send_batch(bodies[: min(len(bodies), count - i)])
    done = threading.Event()
    handled = [0]

    def handler(_: zmqueue.Message) -> None:
        handled[0] += 1
        if handled[0] >= count:
            done.set()

    t0 = time.perf_counter()
    with q.subscribe(handler, prefetch=10):
        done.wait(DRAIN_TIMEOUT_S)
        rate = handled[0] / (time.perf_counter() - t0)
    return rate, handled[0]


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
