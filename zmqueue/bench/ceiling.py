"""Raw pyzmq on loopback: the ceiling for any ZeroMQ design on this machine.

Every measurement runs the server side in another process (spawn), on
127.0.0.1, with the same message sizes and batching as the queue benchmark:

- ``dealer_router_batched``: a DEALER sends one frame holding ``batch``
  msgpack-packed payloads (a list of bytes, like zmqueue's SEND body) to a
  ROUTER that answers each with a small ack; ``window`` requests outstanding
  (1 = synchronous, like one zmqueue client thread). Reported in payloads/s.
- ``dealer_router_single``: one ``size``-byte request and reply at a time;
  p50/p99/p99.9 of the round trip.
- ``push_pull``: PUSH to PULL, ``batch`` payloads packed per frame, no
  replies: the one-way ceiling.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import zmq

from zmqueue.bench.stats import percentiles_ms
from zmqueue.localcluster.ports import free_port

ACK = b"\x01ok"
STOP = b"STOP"
BATCH = b"B"
SINGLE = b"S"
SERVER_START_TIMEOUT_S = 10.0


def _echo_server(endpoint: str, ready: Any) -> None:
    """ROUTER: every request gets a small ack (unpacking the batch first, as a
    real server must); ``STOP`` ends it."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    ready.set()
    try:
        while True:
            ident, data = sock.recv_multipart(copy=True)
            if data == STOP:
                sock.send_multipart([ident, ACK])
                return
            if data[:1] == BATCH:  # a packed batch: unpack it, as a real server must
                n = len(msgpack.unpackb(memoryview(data)[1:]))
                sock.send_multipart([ident, ACK + n.to_bytes(4, "big")])
            else:  # a single payload: answer with a small ack
                sock.send_multipart([ident, ACK])
    finally:
        sock.close(0)
        ctx.term()


def _pull_server(endpoint: str, ready: Any, expected_frames: int, done: Any) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    ready.set()
    n = 0
    try:
        while n < expected_frames:
            msgpack.unpackb(sock.recv())
            n += 1
        done.set()
    finally:
        sock.close(0)
        ctx.term()


@dataclass
class EchoServer:
    """A ROUTER echo server in a spawned process; stop() ends it by pid."""

    endpoint: str
    proc: Any

    @classmethod
    def start(cls) -> EchoServer:
        spawn = mp.get_context("spawn")
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        ready = spawn.Event()
        proc = spawn.Process(target=_echo_server, args=(endpoint, ready), daemon=True)
        proc.start()
        if not ready.wait(SERVER_START_TIMEOUT_S):
            proc.kill()
            raise RuntimeError("the pyzmq echo server did not start")
        return cls(endpoint, proc)

    def stop(self) -> None:
        if self.proc.is_alive():
            s = _dealer(self.endpoint)
            s.send(STOP)
            s.poll(1000)
            s.close(0)
            self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(2)


def _dealer(endpoint: str) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def dealer_router_batched(endpoint: str, size: int = 100, batch: int = 100, window: int = 1,
                          duration_s: float = 2.0) -> dict[str, float]:
    """Payloads/s through DEALER->ROUTER with ``batch`` payloads packed per
    request and ``window`` requests in flight."""
    sock = _dealer(endpoint)
    try:
        payloads = [bytes(size)] * batch
        inflight = 0
        done = 0
        t0 = time.perf_counter()
        deadline = t0 + duration_s
        while True:
            now = time.perf_counter()
            if now < deadline:
                while inflight < window:
                    sock.send(BATCH + msgpack.packb(payloads, use_bin_type=True))
                    inflight += 1
            elif inflight == 0:
                break
            if not sock.poll(5000):
                raise RuntimeError("the pyzmq echo server stopped answering")
            sock.recv()
            inflight -= 1
            done += 1
        elapsed = time.perf_counter() - t0
        return {"payloads_per_s": done * batch / elapsed, "requests_per_s": done / elapsed}
    finally:
        sock.close(0)


def dealer_router_single(endpoint: str, size: int = 100, count: int = 5000,
                         warmup: int = 200) -> dict[str, float]:
    """Round-trip latency of one ``size``-byte request/reply at a time."""
    sock = _dealer(endpoint)
    try:
        body = SINGLE + bytes(size)
        lat = np.empty(count, dtype=np.float64)
        for i in range(-warmup, count):
            t = time.perf_counter()
            sock.send(body)
            if not sock.poll(5000):
                raise RuntimeError("the pyzmq echo server stopped answering")
            sock.recv()
            if i >= 0:
                lat[i] = time.perf_counter() - t
        out = percentiles_ms(lat)
        out["requests_per_s"] = count / float(lat.sum())
        return out
    finally:
        sock.close(0)


def push_pull(size: int = 100, batch: int = 100, frames: int = 20_000) -> dict[str, float]:
    """Payloads/s PUSH->PULL with ``batch`` payloads packed per frame."""
    spawn = mp.get_context("spawn")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ready, done = spawn.Event(), spawn.Event()
    proc = spawn.Process(target=_pull_server, args=(endpoint, ready, frames, done), daemon=True)
    proc.start()
    try:
        if not ready.wait(SERVER_START_TIMEOUT_S):
            raise RuntimeError("the PULL server did not start")
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        frame = msgpack.packb([bytes(size)] * batch, use_bin_type=True)
        t0 = time.perf_counter()
        for _ in range(frames):
            sock.send(frame)
        if not done.wait(60):
            raise RuntimeError("the PULL server did not receive every frame")
        elapsed = time.perf_counter() - t0
        sock.close(0)
        return {"payloads_per_s": frames * batch / elapsed}
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(2)


PIPELINE_WINDOW = 100
"""Single-payload requests in flight for the pipelined ceiling (``Queue.pipeline``'s counterpart)."""


def measure(size: int = 100, batch: int = 100, duration_s: float = 2.0,
            single_count: int = 5000) -> dict[str, float]:
    """One run of every ceiling measurement at one message size."""
    server = EchoServer.start()
    try:
        sync = dealer_router_batched(server.endpoint, size, batch, 1, duration_s)
        piped = dealer_router_batched(server.endpoint, size, batch, 8, duration_s)
        one = dealer_router_single(server.endpoint, size, single_count)
        one_tput = dealer_router_batched(server.endpoint, size, 1, 1, duration_s)
        one_piped = dealer_router_batched(server.endpoint, size, 1, PIPELINE_WINDOW, duration_s)
    finally:
        server.stop()
    pp = push_pull(size, batch, frames=max(1000, int(200_000 / max(1, batch) * duration_s)))
    return {
        "dealer_router_batched_sync_payloads_per_s": sync["payloads_per_s"],
        "dealer_router_batched_window8_payloads_per_s": piped["payloads_per_s"],
        "dealer_router_single_p50_ms": one["p50"],
        "dealer_router_single_p99_ms": one["p99"],
        "dealer_router_single_p99.9_ms": one["p99.9"],
        "dealer_router_single_per_s": one_tput["payloads_per_s"],
        "dealer_router_single_window100_payloads_per_s": one_piped["payloads_per_s"],
        "push_pull_batched_payloads_per_s": pp["payloads_per_s"],
    }
