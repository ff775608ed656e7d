"""Raw pyzmq DEALER/ROUTER and PUSH/PULL at the benchmark's message sizes and
batching, medians of N runs (the measurements live in zmqueue.bench.ceiling).

    python -m benchmarks.ceiling --runs 3 --sizes 100,1024 --batches 1,100
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks import _args
from zmqueue.bench import ceiling
from zmqueue.bench.stats import median


def measure_all(sizes: list[int], batches: list[int], runs: int, duration_s: float) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        for batch in batches:
            results = [ceiling.measure(size, batch, duration_s, single_count=3000) for _ in range(runs)]
            row: dict[str, Any] = {"size": size, "batch": batch, "runs": runs}
            row.update({k: median(r[k] for r in results) for k in results[0]})
            rows.append(row)
            print(json.dumps(row, sort_keys=True), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ceiling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--batches", default="1,100")
    ap.add_argument("--runs", type=_args.runs, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    a = ap.parse_args(argv)
    measure_all([int(x) for x in a.sizes.split(",")], [int(x) for x in a.batches.split(",")], a.runs,
                a.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
