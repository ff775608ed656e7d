"""Where a synchronous R=3 send spends its time: py-spy on every host.

    python -m benchmarks.replication.profile_sync [--seconds 8] [--out DIR]

Starts Consul and 3 hosts, creates a standard queue with R=3 (sync), sends
single 100-byte messages from one client thread for ``--seconds`` while
``py-spy record --idle --format raw`` samples each host process, then prints,
per host, the share of samples in the top frames (idle ``poll`` included: a
host waiting is as telling as a host working). Needs ``pip install py-spy``.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import zmqueue
from zmqueue.bench.stats import percentiles_ms
from zmqueue.localcluster import LocalCluster


def summarize(raw: Path, top: int = 8) -> dict[str, float]:
    """Share of samples by leaf function (``file:function``)."""
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if "(threading.py)" not in f]
        loop = [f for f in frames if "run_once" in f or "request loop" in f]
        if not loop:
            continue  # not the request-loop thread
        leaf = re.sub(r":\d+\)$", ")", frames[-1])
        leaves[leaf] += int(count)
        total += int(count)
    return {k: round(100 * v / total, 1) for k, v in leaves.most_common(top)} if total else {}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is missing: pip install py-spy")
    with tempfile.TemporaryDirectory(prefix="zmq-prof-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        cluster = LocalCluster(Path(tmp) / "c", hosts=3)
        try:
            cluster.start()
            assert cluster.consul_addr is not None
            with zmqueue.connect(cluster.consul_addr, request_timeout=10) as client:
                q = client.create_queue("prof", replication_factor=3, sync_replication=True)
                for _ in range(100):
                    q.send(b"x" * 100)
                lat: list[float] = []
                stop = threading.Event()

                def sender() -> None:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        q.send(b"x" * 100)
                        lat.append(time.perf_counter() - t0)

                spies = [subprocess.Popen(
                    [spy, "record", "--idle", "--format", "raw", "--rate", "200",
                     "--duration", str(int(args.seconds)), "--pid", str(h.pid),
                     "--output", str(out / f"{h.node}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for h in cluster.hosts]
                t = threading.Thread(target=sender)
                t.start()
                for s in spies:
                    s.wait(timeout=args.seconds + 30)
                stop.set()
                t.join(timeout=15)
                home = q.routes.part(0).home
        finally:
            cluster.stop()
        report = {"sends": len(lat), "latency_ms": percentiles_ms(lat), "home": home,
                  "hosts": {h.node: summarize(out / f"{h.node}.txt") for h in cluster.hosts
                            if (out / f"{h.node}.txt").exists()}}
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
