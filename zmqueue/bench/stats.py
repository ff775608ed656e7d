"""Latency percentiles and medians for benchmark results.

Latencies are kept as float64 numpy arrays of seconds (one value per request
or per message); percentiles are nearest-rank on the sorted array, so p99.9 of
fewer than 1000 samples is the maximum.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
PERCENTILES = (50.0, 99.0, 99.9)


def percentiles_ms(samples_s: FloatArray | Sequence[float],
                   pcts: Iterable[float] = PERCENTILES) -> dict[str, float]:
    """``{"p50": ms, "p99": ms, "p99.9": ms}`` of latencies given in seconds
    (NaN when there are no samples)."""
    arr = np.sort(np.asarray(samples_s, dtype=np.float64))
    out: dict[str, float] = {}
    for p in pcts:
        key = f"p{p:g}"
        if arr.size == 0:
            out[key] = float("nan")
            continue
        rank = max(1, int(np.ceil(p / 100.0 * arr.size)))
        out[key] = float(arr[rank - 1] * 1000.0)
    return out


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v == v]  # drop NaN
    return statistics.median(vals) if vals else float("nan")


def fmt_rate(per_s: float) -> str:
    if per_s != per_s:
        return "-"
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f}M"
    if per_s >= 1e3:
        return f"{per_s / 1e3:.1f}k"
    return f"{per_s:.0f}"


def fmt_ms(ms: float) -> str:
    if ms != ms:
        return "-"
    if ms < 1:
        return f"{ms:.2f}"
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"
