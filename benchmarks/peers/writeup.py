"""Turn the JSON lines of ``python -m benchmarks.peers`` into docs/perf/peers.md,
the summary of docs/PERFORMANCE.md and the charts under docs/img/perf/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zmqueue.bench.machine import machine_summary
from zmqueue.bench.report import summarize
from zmqueue.bench.stats import median

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"
PEERS = ("rabbitmq", "nats", "redis")
# workloads whose status is marked provisional (none since W5 was re-measured on 1046cb7)
PROVISIONAL: tuple[str, ...] = ()
Key = tuple[str, str, int]


def group(results: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    by: dict[Key, list[dict[str, Any]]] = {}
    for r in results:
        if "send_msgs_per_s" in r:
            by.setdefault((r["workload"], r["system"], r["message_bytes"]), []).append(r)
    return {k: summarize(v) for k, v in by.items()}


def ceilings(results: Iterable[dict[str, Any]]) -> dict[int, dict[str, float]]:
    by: dict[int, list[dict[str, Any]]] = {}
    for r in results:
        if r.get("system") == "raw-pyzmq":
            by.setdefault(r["message_bytes"], []).append(r)
    return {size: {k: median(float(x[k]) for x in rs) for k in rs[0] if k.startswith(("dealer", "push"))}
            for size, rs in by.items()}


def _best_peer(g: dict[Key, dict[str, Any]], w: str, size: int, key: str, low: bool) -> tuple[str, float]:
    cands = [(s, g[(w, s, size)][key]) for s in PEERS if (w, s, size) in g]
    cands = [c for c in cands if c[1] == c[1]]
    if not cands:
        return "-", float("nan")
    return (min if low else max)(cands, key=lambda c: c[1])


def summary_rows(g: dict[Key, dict[str, Any]], ceil: dict[int, dict[str, float]],
                 sizes: list[int]) -> list[list[str]]:
    rows: list[list[str]] = []

    def status(ok: bool, w: str) -> str:
        s = "met" if ok else "**missed**"
        return s + " (provisional)" if w in PROVISIONAL else s

    for size in sizes:
        for w, target in (("W1", 2.0), ("W1p", 2.0), ("W3", 2.0)):
            z = g.get((w, "zmqueue", size))
            if z is None:
                continue
            peer, pv = _best_peer(g, w, size, "e2e_msgs_per_s", low=False)
            ratio = z["e2e_msgs_per_s"] / pv
            label = "W1p (W1, 100 sends in flight)" if w == "W1p" else w
            rows.append([f"{label} end-to-end msg/s, {size} B", f"{z['e2e_msgs_per_s']:,.0f}",
                         f"{peer} {pv:,.0f}", f"{ratio:.2f}x", f"≥ {target:g}x best peer",
                         status(ratio >= target, w)])
        z = g.get(("W1", "zmqueue", size))
        if z is not None:
            peer, pv = _best_peer(g, "W1", size, "send_p99_ms", low=True)
            rows.append([f"W2 send p99 (one at a time), {size} B", f"{z['send_p99_ms']:.2f} ms",
                         f"{peer} {pv:.2f} ms", f"{z['send_p99_ms'] / pv:.2f}x", "≤ best peer's p99",
                         status(z["send_p99_ms"] <= pv, "W2")])
        rows += single_ceiling_rows(g, ceil, size)
        z = g.get(("W3", "zmqueue", size))
        if z is not None and size in ceil:
            raw = ceil[size]["dealer_router_batched_sync_payloads_per_s"]
            ratio = z["e2e_msgs_per_s"] / raw
            rows.append([f"W3 vs raw pyzmq batched round trip, {size} B", f"{z['e2e_msgs_per_s']:,.0f}",
                         f"raw {raw:,.0f}", f"{100 * ratio:.1f}%", "≥ 25%", status(ratio >= 0.25, "W3")])
        z = g.get(("W4", "zmqueue", size))
        if z is not None:
            peer, pv = _best_peer(g, "W4", size, "e2e_msgs_per_s", low=False)
            rows.append([f"W4 (4 producers, 4 consumers) e2e msg/s, {size} B", f"{z['e2e_msgs_per_s']:,.0f}",
                         f"{peer} {pv:,.0f}", f"{z['e2e_msgs_per_s'] / pv:.2f}x", "-", "-"])
        for w in ("W5", "W5b", "W5p"):
            z, n = g.get((w, "zmqueue-r3", size)), g.get((w, "nats-r3", size))
            if z is None or n is None:
                continue
            ratio = z["e2e_msgs_per_s"] / n["e2e_msgs_per_s"]
            label = "W5p (W5, 100 sends in flight)" if w == "W5p" else w
            rows.append([f"{label} R=3 sync e2e msg/s, {size} B", f"{z['e2e_msgs_per_s']:,.0f}",
                         f"nats-r3 {n['e2e_msgs_per_s']:,.0f}", f"{ratio:.2f}x", "≥ 1.5x NATS R=3",
                         status(ratio >= 1.5, w)])
    half = g.get(("W5-half", "zmqueue-r3", 100))
    if half is not None:
        rows.append(["R=3 sync send p99 at half the max W5 rate, 100 B", f"{half['send_p99_ms']:.2f} ms",
                     f"paced at {half['send_msgs_per_s']:,.0f} msg/s", "-", "< 10 ms",
                     status(half["send_p99_ms"] < 10, "W5-half")])
    rows += queue_ops_rows()
    rows += replication_rows()
    rows += security_rows()
    lost = sum(int(v["lost"]) for v in g.values())
    dup = sum(int(v["duplicates"]) for v in g.values())
    sent = sum(int(v["sent"]) for v in g.values())
    rows.append(["losses / duplicates, every run of every system", f"{lost} / {dup}",
                 f"of {sent:,} confirmed sends", "-", "0 / 0", status(lost == 0 and dup == 0, "")])
    return rows


def single_ceiling_rows(g: dict[Key, dict[str, Any]], ceil: dict[int, dict[str, float]],
                        size: int) -> list[list[str]]:
    """W1 and W1p beside what raw pyzmq does with one payload per request (1
    and 100 in flight, an echo server with no queue behind it), the most a
    ZeroMQ round trip per message reaches on this machine (W1p's pipeline
    coalesces sends, so it can pass it). Each row says where 2x the best peer
    (those rows' target) lies against that ceiling; and W2's send p99 beside
    the raw single round trip's p99 (measured with nothing else running,
    where W2 shares the CPUs with its consumer)."""
    rows: list[list[str]] = []
    for w, key, what in (("W1", "dealer_router_single_per_s", "1 in flight"),
                         ("W1p", "dealer_router_single_window100_payloads_per_s", "100 in flight")):
        z = g.get((w, "zmqueue", size))
        raw = ceil.get(size, {}).get(key)
        if z is None or not raw:
            continue
        _, pv = _best_peer(g, w, size, "e2e_msgs_per_s", low=False)
        beside = f"; 2x best peer = {2 * pv / raw:.2f}x raw" if pv == pv else ""
        rows.append([f"{w} vs raw pyzmq single-payload round trips ({what}), {size} B",
                     f"{z['e2e_msgs_per_s']:,.0f}", f"raw {raw:,.0f}",
                     f"{100 * z['e2e_msgs_per_s'] / raw:.0f}%{beside}", "-", "-"])
    z, raw = g.get(("W1", "zmqueue", size)), ceil.get(size, {}).get("dealer_router_single_p99_ms")
    if z is not None and raw:
        _, pv = _best_peer(g, "W1", size, "send_p99_ms", low=True)
        beside = f"; best peer = {pv / raw:.2f}x raw" if pv == pv else ""
        rows.append([f"W2 send p99 vs raw pyzmq single-payload p99 (nothing else running), {size} B",
                     f"{z['send_p99_ms']:.2f} ms", f"raw {raw:.3f} ms",
                     f"{z['send_p99_ms'] / raw:.2f}x{beside}", "-", "-"])
    return rows


def md_table(header: list[str], rows: list[list[str]], align: str = "") -> str:
    """A markdown table; ``align`` has one letter per column, l or r
    (default: the first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def full_table(g: dict[Key, dict[str, Any]], size: int) -> str:
    header = ["workload", "system", "send msg/s", "e2e msg/s", "send p50 ms", "send p99 ms",
              "send p99.9 ms", "e2e p50 ms", "e2e p99 ms", "sent", "lost", "dup"]
    rows = []
    for (w, s, sz), v in sorted(g.items()):
        if sz != size:
            continue
        rows.append([w, s, f"{v['send_msgs_per_s']:,.0f}", f"{v['e2e_msgs_per_s']:,.0f}",
                     f"{v['send_p50_ms']:.2f}", f"{v['send_p99_ms']:.2f}", f"{v['send_p99.9_ms']:.2f}",
                     f"{v['e2e_p50_ms']:.1f}", f"{v['e2e_p99_ms']:.1f}", f"{int(v['sent']):,}",
                     str(v["lost"]), str(v["duplicates"])])
    return md_table(header, rows, "ll" + "r" * (len(header) - 2))


def chart(g: dict[Key, dict[str, Any]], path: Path, size: int = 100) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = ["zmqueue", "rabbitmq", "nats", "redis", "zmqueue-r3", "nats-r3"]
    workloads = ["W1", "W1p", "W3", "W4", "W5", "W5p", "W5b"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6), dpi=90)
    width = 0.14
    for i, s in enumerate(systems):
        vals = [g[(w, s, size)]["e2e_msgs_per_s"] if (w, s, size) in g else 0 for w in workloads]
        ax1.bar([x + i * width for x in range(len(workloads))], vals, width, label=s)
    ax1.set_xticks([x + 2.5 * width for x in range(len(workloads))], workloads)
    ax1.set_yscale("log")
    ax1.set_ylabel("end-to-end msg/s (log)")
    ax1.set_title(f"throughput, {size} B messages")
    ax1.legend(fontsize=7)
    lat_sys = [s for s in systems if ("W1", s, size) in g or ("W5", s, size) in g]
    for j, pct in enumerate(("send_p50_ms", "send_p99_ms")):
        vals = [(g.get(("W1", s, size)) or g[("W5", s, size)])[pct] for s in lat_sys]
        ax2.bar([x + j * 0.4 for x in range(len(lat_sys))], vals, 0.4, label=pct.split("_")[1])
    ax2.set_xticks([x + 0.2 for x in range(len(lat_sys))], lat_sys, fontsize=7)
    ax2.set_yscale("log")
    ax2.set_ylabel("send latency ms (log)")
    ax2.set_title("W2 one send at a time (R=3: W5)")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def storage_summary(sections_kept: int = 4) -> str:
    """The tables of storage.md's first ``sections_kept`` sections (the latest
    changes and measures, then the latest full run); the older sections stay
    on that page."""
    path = DOCS / "perf" / "storage.md"
    if not path.exists():
        return "_(docs/perf/storage.md is not written yet)_"
    sections = re.split(r"^## ", path.read_text(), flags=re.M)[1 : 1 + sections_kept]
    found = [m.group(0).rstrip() for text in sections for m in re.finditer(r"(^\|.*\|\n)+", text, re.M)
             if m.group(0).startswith(("| measure |", "| per call"))]
    return "\n\n".join(found) or "_(no table found in docs/perf/storage.md)_"


def _first_table(name: str) -> str:
    path = DOCS / "perf" / name
    if not path.exists():
        return ""
    m = re.search(r"(^\|.*\|\n)+", path.read_text(), re.M)
    return m.group(0).rstrip() if m else ""


def _tables_headed(name: str, header: str) -> str:
    """Every table of docs/perf/<name> whose header row starts with ``header``."""
    path = DOCS / "perf" / name
    if not path.exists():
        return ""
    found = [m.group(0).rstrip() for m in re.finditer(r"(^\|.*\|\n)+", path.read_text(), re.M)
             if m.group(0).startswith(header)]
    return "\n\n".join(found)


def _rows_of(name: str) -> list[list[str]]:
    """Every table row of docs/perf/<name>, as lists of stripped cells."""
    path = DOCS / "perf" / name
    if not path.exists():
        return []
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in path.read_text().splitlines() if line.startswith("|")]


def replication_rows() -> list[list[str]]:
    """The targets of the "Replication" issue, from docs/perf/replication.md."""
    rows = []
    table = _rows_of("replication.md")
    by = {r[0]: r for r in table}
    # the sustained (many producers) row; older pages had one row, one producer
    tp = next((r for r in table if r[0].startswith("send_batch throughput, ")
               and "producers" in r[0]), None) or by.get("send_batch throughput (batch 100)")
    if tp and len(tp) >= 5:
        ok = "met" if float(tp[3].rstrip("%")) >= 50 else "**missed**"
        what = tp[0].removeprefix("send_batch throughput").strip(", ").replace(" (batch 100)", "")
        rows.append([f"R=3 sync send_batch throughput vs R=1, 100 B{', ' + what if what else ''} "
                     "(replication.md)", tp[2], f"R=1 {tp[1]}", tp[3], "≥ 50% of R=1", ok])
    p50, mx, n = by.get("latest failover p50"), by.get("latest failover max"), by.get("latest kills")
    if p50 and mx and n and len(p50) >= 3 and len(mx) >= 3:  # an alternated run beside its tree before
        met = float(p50[1].rstrip(" s")) <= 3 and float(mx[1].rstrip(" s")) <= 10
        delta = float(p50[1].rstrip(" s")) - float(p50[2].rstrip(" s"))
        rows.append([f"FIFO failover after kill -9 of the writer, {n[1]} kills (replication.md, latest run)",
                     f"p50 {p50[1]} (median of runs), max {mx[1]}",
                     f"the tree before, alternated: p50 {p50[2]}, max {mx[2]}", f"{delta:+.2f} s",
                     "p50 ≤ 3 s, max ≤ 10 s, ≥ 20 kills", "met" if met else "**missed**"])
        return rows
    p50, mx, n = by.get("failover p50"), by.get("failover max"), by.get("kills")
    if p50 and mx and n:
        met = (float(p50[1].rstrip(" s")) <= 3 and float(mx[1].rstrip(" s")) <= 10
               and int(n[1]) >= 20)
        rows.append([f"FIFO failover after kill -9 of the writer, {n[1]} kills (replication.md)",
                     f"p50 {p50[1]}, max {mx[1]}", "-", "-", "p50 ≤ 3 s, max ≤ 10 s, ≥ 20 kills",
                     "met" if met else "**missed**"])
    return rows


def security_rows() -> list[list[str]]:
    """The CURVE cost target, from docs/perf/security.md."""
    by = {r[0]: r for r in _rows_of("security.md")}
    plain, curve = by.get("plain"), by.get("curve")
    if not plain or not curve or len(curve) < 3:
        return []
    cost = float(curve[2].rstrip("%"))
    return [["CURVE cost, batched send 100 x 100 B (security.md)", f"{curve[1]} msg/s",
             f"plain {plain[1]} msg/s", curve[2], "≤ 30%", "met" if cost <= 30 else "**missed**"]]


def code_commit() -> str:
    """The measured tree: BENCH_COMMIT (set when running from a git archive snapshot) or git."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_all(results: list[dict[str, Any]], command: str) -> None:
    g = group(results)
    ceil = ceilings(results)
    sizes = sorted({k[2] for k in g})
    runs = max((int(v["runs"]) for v in g.values()), default=0)
    chart(g, DOCS / "img" / "perf" / "peers.png")
    from benchmarks.peers import prose

    summary = md_table(["what", "zmqueue", "reference (same invocation)", "ratio", "target", "status"],
                       summary_rows(g, ceil, sizes), "lrrrll")
    ceiling_rows = [[f"{s} B", f"{c['dealer_router_batched_sync_payloads_per_s']:,.0f}",
                     f"{c['dealer_router_batched_window8_payloads_per_s']:,.0f}",
                     f"{c['push_pull_batched_payloads_per_s']:,.0f}",
                     _count(c.get("dealer_router_single_per_s")),
                     _count(c.get("dealer_router_single_window100_payloads_per_s")),
                     f"{c['dealer_router_single_p50_ms']:.3f}",
                     f"{c['dealer_router_single_p99_ms']:.3f}"] for s, c in sorted(ceil.items())]
    ctx = {
        "date": time.strftime("%Y-%m-%d"), "machine": machine_summary(), "command": command, "runs": runs,
        "summary": summary, "full": "\n\n".join(f"### {s} B messages\n\n{full_table(g, s)}" for s in sizes),
        "ceiling": md_table(["size", "DEALER/ROUTER batch 100, 1 in flight (payloads/s)",
                             "same, 8 in flight", "PUSH/PULL batch 100", "single payload, 1 in flight",
                             "single payloads, 100 in flight", "req/rep p50 ms", "req/rep p99 ms"],
                            ceiling_rows),
        "storage": storage_summary(), "queues": _queues_table(),
        "replication": _tables_headed("replication.md", "| measurement |") or "_(not measured yet)_",
        "security": _first_table("security.md") or "_(not measured yet)_",
        "many_queues": _first_table("many_queues.md") or "_(not measured yet)_",
        "parked": _first_table("parked.md") or "_(not measured yet)_",
        "commit": code_commit(),
        "load": _load_range(results),
        "analytics": (prose.ANALYTICS
                      if (DOCS / "perf" / "analytics.md").exists() else "_(not measured yet)_"),
        "promises": prose.PROMISES, "method": prose.METHOD.format(runs=runs),
        "jsonl": "\n".join(json.dumps(r, sort_keys=True, default=str) for r in results),
    }
    ctx["analysis"] = kept_analysis(DOCS / "PERFORMANCE.md")
    ctx["reading"] = prose.READING.format(**ctx)
    (DOCS / "perf" / "peers.md").write_text(prose.PEERS_MD.format(**ctx))
    (DOCS / "PERFORMANCE.md").write_text(prose.PERFORMANCE_MD.format(**ctx))


ANALYSIS_HEADING = "## Where the time goes\n"
NO_ANALYSIS = ("_(nothing yet: write what profiles and experiments found here, under this "
               "heading; `--write` keeps this section as it is)_")


def kept_analysis(doc: Path) -> str:
    """The hand-written last section of ``doc`` (PERFORMANCE.md), "Where the
    time goes": ``--write`` regenerates the tables and their summary around
    it and keeps it word for word, so a session adds its findings there, in
    the document, and a later invocation does not undo them."""
    try:
        text = doc.read_text()
    except FileNotFoundError:
        return NO_ANALYSIS
    at = text.find("\n" + ANALYSIS_HEADING)
    if at < 0:
        return NO_ANALYSIS
    return text[at + 1 + len(ANALYSIS_HEADING):].strip("\n") or NO_ANALYSIS


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _load_range(results: list[dict[str, Any]]) -> str:
    loads = [float(r["loadavg_1m"]) for r in results if "loadavg_1m" in r]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "not recorded"


def queue_ops_rows() -> list[list[str]]:
    """The two targets of the "Queues" issue, from docs/perf/queues.md."""
    rows = []
    for line in _queues_table().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 5 or cells[4] in ("-", "target") or cells[4].startswith("-"):
            continue
        label, z, r, ratio, target = cells
        value = float(ratio.rstrip("%x"))
        ok = value >= 25 if "%" in ratio else value <= 3
        rows.append([f"{label}, 1 thread, 100 B (queues.md)", z, f"raw pyzmq {r}", ratio, target,
                     "met" if ok else "**missed**"])
    return rows


def _queues_table() -> str:
    path = DOCS / "perf" / "queues.md"
    if not path.exists():
        return "_(run `python -m benchmarks.queues --runs 3 --write`)_"
    m = re.search(r"(^\|.*\|\n)+", path.read_text(), re.M)
    return m.group(0).rstrip() if m else ""
