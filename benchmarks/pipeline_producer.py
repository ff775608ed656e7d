"""A pipelined producer alone (W1p's producer, no consumer) against one host.

    python -m benchmarks.pipeline_producer [--rounds 3] [--seconds 4]
        [--window 100] [--max-requests N] [--size 100]

Each round: ``Queue.pipeline(window)``, then for ``--seconds``: ``window``
``send`` calls and ``confirm_all()``, again and again. Prints one JSON line
per round: confirmed messages/s, the client process's CPU and the host's
request-loop thread CPU (``/proc/<pid>/task/<pid>/schedstat``) per 100
messages, and the SEND requests per 100 messages (fewer: more coalescing).
One fresh ``LocalCluster(hosts=1)`` (Consul dev agent and a host) in a
temporary directory, stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import json
import time

import zmqueue
from benchmarks.hosttrees import running_cluster
from benchmarks.percall import thread_cpu_ns


def burst(pipe: zmqueue.SendPipeline, body: bytes, window: int) -> None:
    """``window`` sends, then wait for every one (W1p's producer)."""
    for _ in range(window):
        pipe.send(body)
    pipe.confirm_all()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_producer",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--max-requests", type=int, default=None, help="default: the pipeline's")
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    args = ap.parse_args(argv)
    with running_cluster(None, prefix="zmqueue-pipeprod-") as lc, zmqueue.connect(lc.consul_addr) as c:
        q = c.create_queue("pipeprod", visibility_timeout=600)
        body = bytes(args.size)
        pid = lc.hosts[0].pid
        for r in range(args.rounds):
            pipe = q.pipeline(args.window, max_requests=args.max_requests)
            for _ in range(50):  # warm up routes and connections
                burst(pipe, body, args.window)
            q.purge()
            loop0, cpu0, req0, n = thread_cpu_ns(pid)["loop"], time.process_time(), pipe.requests, 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                burst(pipe, body, args.window)
                n += args.window
            dt = time.perf_counter() - t0
            print(json.dumps({
                "round": r + 1, "msgs_per_s": round(n / dt),
                "client_cpu_us_per_100": round((time.process_time() - cpu0) / n * 1e8, 1),
                "host_loop_cpu_us_per_100": round((thread_cpu_ns(pid)["loop"] - loop0) / n / 10, 1),
                "requests_per_100": round((pipe.requests - req0) / n * 100, 2)}), flush=True)
            q.purge()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
