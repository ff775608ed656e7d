"""``zmqueue analytics report``: every job over the logs, as Parquet tables,
PNG charts and a one-page HTML summary that embeds the charts.

Layout of ``out``::

    index.html               the summary (charts embedded as data: URIs)
    tables/<job>.parquet     one table per job (one file each)
    charts/<name>.png        throughput, latency, deliveries, depth
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from analytics import charts
from analytics.jobs import JOBS
from analytics.jobs.common import host_count, load_records, one_replica
from analytics.progress import SparkProgress

RAW_JOBS = {"replication", "corruption"}  # run on every replica's log, not on one copy
CHARTS: dict[str, tuple[str, Callable[[Any, Path], Path | None]]] = {
    "throughput": ("throughput", charts.throughput_chart),
    "latency": ("latency", charts.latency_chart),
    "deliveries": ("deliveries", charts.deliveries_chart),
    "depth": ("depth", charts.depth_chart),
}
HTML_ROWS_MAX = 50


@dataclass
class Report:
    out: Path
    tables: dict[str, Any] = field(default_factory=dict)  # job -> pandas DataFrame
    charts: dict[str, Path] = field(default_factory=dict)
    records: int = 0
    hosts: int = 0


def build_report(spark: Any, paths: Sequence[str], out: Path, options: dict[str, str] | None = None,
                 progress: bool = True) -> Report:
    out = Path(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    (out / "charts").mkdir(parents=True, exist_ok=True)
    rep = Report(out, hosts=host_count(paths))
    with SparkProgress(spark, len(JOBS) + 2, enabled=progress) as prog:
        prog.step("reading the logs")
        raw = load_records(spark, paths, **(options or {})).cache()
        rep.records = raw.count()
        view = one_replica(raw).cache() if rep.hosts > 1 else raw
        for name, (job, _) in JOBS.items():
            prog.step(name)
            df = job(raw if name in RAW_JOBS else view)
            df.coalesce(1).write.mode("overwrite").parquet(str(out / "tables" / f"{name}.parquet"))
            rep.tables[name] = spark.read.parquet(str(out / "tables" / f"{name}.parquet")).toPandas()
        prog.step("charts and summary")
        for name, (job_name, draw) in CHARTS.items():
            png = draw(_sorted(rep.tables[job_name]), out / "charts" / f"{name}.png")
            if png is not None:
                rep.charts[name] = png
        (out / "index.html").write_text(render_html(rep, paths))
        raw.unpersist()
    return rep


def _sorted(pdf: Any) -> Any:
    keys = [c for c in ("queue", "minute") if c in pdf.columns]
    return pdf.sort_values(keys) if keys else pdf


def _whole(pdf: Any) -> Any:
    """The table with each float column of whole numbers shown as integers: a
    count with nulls (a consumer's bytes) comes out of Spark as float64, "7.0"."""
    out = pdf.copy()
    for c in out.columns:
        col = out[c]
        if col.dtype.kind == "f" and col.notna().any() and bool((col.dropna() % 1 == 0).all()):
            out[c] = ["" if v != v else str(int(v)) for v in col]
    return out


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def render_html(rep: Report, paths: Sequence[str]) -> str:
    sections = []
    for name, (_, text) in JOBS.items():
        pdf = rep.tables[name]
        chart = _img(rep.charts[name]) if name in rep.charts else ""
        more = f"<p class=note>first {HTML_ROWS_MAX} of {len(pdf)} rows; all in tables/{name}.parquet</p>" \
            if len(pdf) > HTML_ROWS_MAX else ""
        body = _whole(pdf.head(HTML_ROWS_MAX)).to_html(index=False, border=0, na_rep="") if len(pdf) else \
            "<p class=note>no rows</p>"
        sections.append(f"<h2>{html.escape(name)}</h2><p>{html.escape(text)}</p>{chart}{body}{more}")
    bad = len(rep.tables.get("corruption", []))
    status = (f"<p class=bad>{bad} corrupt or truncated block(s): see corruption</p>" if bad
              else "<p class=ok>every block verified</p>")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    src = ", ".join(html.escape(str(p)) for p in paths)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>zmqueue analytics report</title>
<style>body{{font:14px sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse;
font-size:12px}}td,th{{padding:2px 8px;text-align:right}}tr:nth-child(even){{background:#f4f4f4}}
img{{max-width:100%}}.note{{color:#666}}.bad{{color:#b00}}.ok{{color:#070}}</style></head><body>
<h1>zmqueue analytics report</h1>
<p>{rep.records:,} records from {rep.hosts} host(s) under {src}; generated {when}.</p>{status}
{"".join(sections)}
</body></html>
"""
