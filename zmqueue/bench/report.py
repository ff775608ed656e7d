"""The final table of ``zmqueue bench`` and its JSON lines."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.table import Table

from zmqueue.bench.stats import fmt_ms, fmt_rate, median

MEDIAN_KEYS = ("send_msgs_per_s", "e2e_msgs_per_s", "send_p50_ms", "send_p99_ms", "send_p99.9_ms",
               "e2e_p50_ms", "e2e_p99_ms", "e2e_p99.9_ms")


def json_line(result: dict[str, Any]) -> str:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(result), sort_keys=True)


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs of one (system, workload, size); totals for checks."""
    first = runs[0]
    out: dict[str, Any] = {k: first[k] for k in ("system", "workload", "message_bytes") if k in first}
    out["runs"] = len(runs)
    for k in MEDIAN_KEYS:
        out[k] = median(float(r[k]) for r in runs)
    for k in ("sent", "received", "lost", "duplicates", "failed_sends", "unknown_received"):
        out[k] = sum(int(r.get(k, 0)) for r in runs)
    return out


def _pcts(r: dict[str, Any], kind: str) -> str:
    return "/".join(fmt_ms(r[f"{kind}_{p}_ms"]) for p in ("p50", "p99", "p99.9"))


def results_table(rows: Sequence[dict[str, Any]], title: str = "zmqueue bench") -> Table:
    """Medians per (system, workload, size); latencies as p50 / p99 / p99.9 ms."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                  caption="ms: p50/p99/p99.9; medians over runs; sent, lost, dup: totals")
    for col in ("system", "load", "bytes", "runs", "send/s", "e2e/s", "send ms", "e2e ms", "sent",
                "lost", "dup"):
        table.add_column(col, justify="left" if col in ("system", "load") else "right", no_wrap=True)
    for r in rows:
        lost, dup = int(r.get("lost", 0)), int(r.get("duplicates", 0))
        table.add_row(
            str(r.get("system", "")), str(r.get("workload", "")), str(r.get("message_bytes", "")),
            str(r.get("runs", 1)), fmt_rate(r["send_msgs_per_s"]), fmt_rate(r["e2e_msgs_per_s"]),
            _pcts(r, "send"), _pcts(r, "e2e"), f"{int(r.get('sent', 0)):,}",
            f"[{'red' if lost else 'green'}]{lost}[/]", f"[{'red' if dup else 'green'}]{dup}[/]")
    return table
