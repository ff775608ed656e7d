"""One benchmark run: set up the queue, start consumer and producer
processes (spawn), show live progress, stop producers after the duration,
let consumers drain, then check every message id that was confirmed.

Losses are confirmed sends never received; duplicates are receipts of a
message beyond its first. Sends that failed are counted apart: they may or
may not arrive, so they are neither losses nor duplicates.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from zmqueue.bench import worker
from zmqueue.bench.backend import load_backend_class
from zmqueue.bench.config import BenchConfig
from zmqueue.bench.signals import children_ignore_sigint
from zmqueue.bench.stats import percentiles_ms

JOIN_TIMEOUT_S = 30.0
Progress = Callable[[float, int, int], None]
"""Called about 4 times a second with (elapsed s, confirmed sends, received)."""


def run(spec: str, backend_args: dict[str, Any], cfg: BenchConfig,
        progress: Progress | None = None) -> dict[str, Any]:
    cfg.validate()
    backend = load_backend_class(spec)(**backend_args)
    target = backend.setup(cfg)
    try:
        with tempfile.TemporaryDirectory(prefix="zmqueue-bench-run-") as tmp:
            result = _run_processes(spec, backend_args, target, cfg, Path(tmp), progress)
    finally:
        with contextlib.suppress(Exception):
            backend.teardown(target)
    result["system"] = backend.name
    result["notes"] = backend.notes
    result["loadavg_1m"] = os.getloadavg()[0]
    return result


def _run_processes(spec: str, backend_args: dict[str, Any], target: dict[str, Any], cfg: BenchConfig,
                   tmp: Path, progress: Progress | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    n_p, n_c = cfg.producers, cfg.consumers
    shared = worker.Shared(ctx, n_p + n_c)
    outs = [str(tmp / f"proc{i}") for i in range(n_p + n_c)]
    procs = []
    for i in range(n_c):
        procs.append(ctx.Process(target=worker.run_consumer, daemon=True, name=f"consumer-{i}", args=(
            spec, backend_args, target, cfg, i, n_p + i, shared, outs[n_p + i])))
    for i in range(n_p):
        procs.append(ctx.Process(target=worker.run_producer, daemon=True, name=f"producer-{i}", args=(
            spec, backend_args, target, cfg, i, i, shared, outs[i])))
    try:
        with children_ignore_sigint():  # the parent stops them (Ctrl-C signals them too at a terminal)
            for p in procs:
                p.start()
        _wait_ready(shared, procs)
        t0 = time.monotonic()
        t0_ns = time.monotonic_ns()
        shared.go.set()
        producers, consumers = procs[n_c:], procs[:n_c]
        t_send_end = _watch(shared, n_p, cfg, t0, progress, producers)
        _drain(shared, n_p, cfg, t0, progress)
        shared.stop_consumers.set()
        for p in consumers:
            p.join(JOIN_TIMEOUT_S)
    finally:
        shared.stop_producers.set()
        shared.stop_consumers.set()
        for p in procs:
            if p.pid is None:  # (not started)
                continue
            p.join(5)
            if p.is_alive():
                p.kill()  # by pid: this process's own child
                p.join(5)
    return _check(cfg, [worker.load(o) for o in outs[:n_p]], [worker.load(o) for o in outs[n_p:]],
                  t_send_end - t0, t0_ns)


def _wait_ready(shared: worker.Shared, procs: list[Any]) -> None:
    deadline = time.monotonic() + worker.READY_TIMEOUT_S
    while not all(shared.ready[:]):
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark processes did not get ready in time")
        for p in procs:
            if not p.is_alive() and p.exitcode is not None:
                raise RuntimeError(f"a benchmark process exited with code {p.exitcode} before starting")
        time.sleep(0.05)


def _counts(shared: worker.Shared, n_p: int) -> tuple[int, int]:
    c = shared.counts[:]
    return sum(c[:n_p]), sum(c[n_p:])


def _watch(shared: worker.Shared, n_p: int, cfg: BenchConfig, t0: float, progress: Progress | None,
           producers: list[Any]) -> float:
    """Until every producer is done; returns when sending ended."""
    hard_stop = t0 + cfg.duration_s + JOIN_TIMEOUT_S
    while any(p.is_alive() for p in producers):
        now = time.monotonic()
        if now > t0 + cfg.duration_s:
            shared.stop_producers.set()
        if now > hard_stop:
            break
        if progress:
            progress(now - t0, *_counts(shared, n_p))
        for p in producers:
            p.join(0.25 / len(producers))
    return time.monotonic()


def _drain(shared: worker.Shared, n_p: int, cfg: BenchConfig, t0: float, progress: Progress | None) -> None:
    deadline = time.monotonic() + cfg.drain_timeout_s
    while time.monotonic() < deadline:
        sent, got = _counts(shared, n_p)
        if progress:
            progress(time.monotonic() - t0, sent, got)
        if got >= sent:
            return
        time.sleep(0.1)


def _check(cfg: BenchConfig, prod: list[dict[str, Any]], cons: list[dict[str, Any]],
           send_elapsed_s: float, t0_ns: int) -> dict[str, Any]:
    errors = [str(r["error"]) for r in prod + cons if str(r.get("error", ""))]
    sent = sum(int(r.get("sent", 0)) for r in prod)
    failed = sum(len(r.get("failed", ())) for r in prod)
    keys = np.concatenate([r["keys"] for r in cons if "keys" in r] or [np.empty(0, np.uint64)])
    uniq = np.unique(keys)
    expected = np.concatenate([_confirmed_keys(i, r) for i, r in enumerate(prod)]
                              or [np.empty(0, np.uint64)])
    lost = int(np.setdiff1d(expected, uniq, assume_unique=True).size)
    unexpected = int(np.setdiff1d(uniq, expected, assume_unique=True).size)
    send_lat = np.concatenate([r["send_lat"] for r in prod if "send_lat" in r] or [np.empty(0)])
    e2e = np.concatenate([r["e2e"] for r in cons if "e2e" in r] or [np.empty(0)])
    last_ns = max([int(r.get("last_ns", 0)) for r in cons] or [0])
    e2e_elapsed = max(1e-9, (last_ns - t0_ns) / 1e9) if last_ns else float("nan")
    out: dict[str, Any] = {"config": cfg.to_dict(), "workload": cfg.workload,
                           "message_bytes": cfg.message_bytes, "sent": sent, "failed_sends": failed,
                           "received": int(keys.size), "unique_received": int(uniq.size),
                           "lost": lost, "duplicates": int(keys.size - uniq.size),
                           "unknown_received": unexpected - _failed_received(prod, uniq),
                           "send_msgs_per_s": sent / max(1e-9, send_elapsed_s),
                           "e2e_msgs_per_s": uniq.size / e2e_elapsed,
                           "send_requests": int(send_lat.size)}
    out.update({f"send_{k}_ms": v for k, v in percentiles_ms(send_lat).items()})
    out.update({f"e2e_{k}_ms": v for k, v in percentiles_ms(e2e).items()})
    out["errors"] = errors[:5]
    return out


def _confirmed_keys(index: int, r: dict[str, Any]) -> Any:
    seq_end = int(r.get("seq_end", 0))
    seqs = np.arange(seq_end, dtype=np.uint64)
    failed = r.get("failed")
    if failed is not None and len(failed):
        seqs = np.setdiff1d(seqs, failed.astype(np.uint64))
    return (np.uint64(index) << np.uint64(worker.SEQ_BITS)) | seqs


def _failed_received(prod: list[dict[str, Any]], uniq: Any) -> int:
    failed = [(np.uint64(i) << np.uint64(worker.SEQ_BITS)) | r["failed"].astype(np.uint64)
              for i, r in enumerate(prod) if "failed" in r and len(r["failed"])]
    if not failed:
        return 0
    return int(np.intersect1d(np.concatenate(failed), uniq).size)
