"""Producer and consumer processes (started with multiprocessing spawn).

Every body starts with a 20-byte header: producer index (u32), sequence
number (u64) and the send time (i64, ``time.monotonic_ns()``, one clock for
every process on the host), then zero padding to the message size. Each
process writes what it did to an ``.npz`` file for the parent to check:
producers the count of confirmed messages, the sequence numbers of failed
sends and their send latencies; consumers every (producer, sequence) key they
received and the end-to-end latency of each.
"""

from __future__ import annotations

import struct
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from zmqueue.bench.backend import Target, load_backend_class
from zmqueue.bench.config import HEADER_BYTES, BenchConfig

HEADER = struct.Struct(">IQq")
assert HEADER.size == HEADER_BYTES
SEQ_BITS = 40
RECEIVE_WAIT_S = 0.5
READY_TIMEOUT_S = 120.0


def make_body(producer: int, seq: int, size: int) -> bytes:
    return HEADER.pack(producer, seq, time.monotonic_ns()).ljust(size, b"\0")


def key_of(producer: int, seq: int) -> int:
    return (producer << SEQ_BITS) | seq


class Shared:
    """Counters and events shared with the parent: ``counts[i]`` is process
    i's confirmed sends (producers) or received messages (consumers)."""

    def __init__(self, ctx: Any, n_procs: int) -> None:
        self.counts = ctx.Array("q", n_procs, lock=False)
        self.ready = ctx.Array("b", n_procs, lock=False)
        self.go = ctx.Event()
        self.stop_producers = ctx.Event()
        self.stop_consumers = ctx.Event()


def run_producer(spec: str, backend_args: dict[str, Any], target: Target, cfg: BenchConfig,
                 index: int, slot: int, shared: Shared, out: str) -> None:
    sent = 0
    failed: list[int] = []
    lat: list[float] = []
    error = ""
    try:
        producer = load_backend_class(spec).producer(target, cfg, index)
        shared.ready[slot] = 1
        shared.go.wait(READY_TIMEOUT_S)
        t_start = time.monotonic()
        t_end = t_start + cfg.duration_s
        t_warm = t_start + cfg.warmup_s
        my_max = cfg.max_messages // cfg.producers
        interval = cfg.batch * cfg.window * cfg.producers / cfg.rate_per_s if cfg.rate_per_s else 0.0
        next_at = t_start
        seq = 0
        while seq < my_max and not shared.stop_producers.is_set():
            now = time.monotonic()
            if now >= t_end:
                break
            if interval:
                if now < next_at:
                    time.sleep(next_at - now)
                next_at += interval
            n = min(cfg.batch * cfg.window, my_max - seq)
            bodies = [make_body(index, seq + i, cfg.message_bytes) for i in range(n)]
            counted = time.monotonic() >= t_warm
            t0 = time.perf_counter()
            try:
                producer.send(bodies)
            except Exception as exc:  # a failed send: its messages may or may not arrive
                failed.extend(range(seq, seq + n))
                error = f"{type(exc).__name__}: {exc}"
            else:
                if counted:
                    lat.append(time.perf_counter() - t0)
                sent += n
                shared.counts[slot] = sent
            seq += n
        producer.close()
    except Exception:
        error = traceback.format_exc()
    np.savez(out, sent=np.int64(sent), failed=np.asarray(failed, dtype=np.uint64),
             send_lat=np.asarray(lat, dtype=np.float64), seq_end=np.int64(sent + len(failed)),
             error=np.asarray(error))


def run_consumer(spec: str, backend_args: dict[str, Any], target: Target, cfg: BenchConfig,
                 index: int, slot: int, shared: Shared, out: str) -> None:
    keys: list[int] = []
    e2e: list[float] = []
    error = ""
    last_ns = 0
    try:
        consumer = load_backend_class(spec).consumer(target, cfg, index)
        shared.ready[slot] = 1
        shared.go.wait(READY_TIMEOUT_S)
        while not shared.stop_consumers.is_set():
            got = consumer.receive(cfg.per_receive, RECEIVE_WAIT_S)
            if not got:
                continue
            now = time.monotonic_ns()
            for body, _ in got:
                p, s, t = HEADER.unpack_from(body)
                keys.append(key_of(p, s))
                e2e.append((now - t) / 1e9)
            consumer.ack([tok for _, tok in got])
            last_ns = time.monotonic_ns()
            shared.counts[slot] = len(keys)
        consumer.close()
    except Exception:
        error = traceback.format_exc()
    np.savez(out, keys=np.asarray(keys, dtype=np.uint64), e2e=np.asarray(e2e, dtype=np.float64),
             last_ns=np.int64(last_ns), error=np.asarray(error))


def load(out: str) -> dict[str, Any]:
    path = Path(out if out.endswith(".npz") else out + ".npz")
    if not path.exists():
        return {"error": f"{path.name} was not written (the process died)"}
    with np.load(path) as z:
        return {k: z[k] for k in z.files}
