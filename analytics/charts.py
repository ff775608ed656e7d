"""PNG charts of the report (matplotlib, Agg backend, small files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DPI = 80


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _per_queue_lines(pdf: Any, value_cols: list[str], title: str, ylabel: str, path: Path) -> Path | None:
    if pdf.empty:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(value_cols), 1, figsize=(8, 2.6 * len(value_cols)), sharex=True,
                             squeeze=False)
    for ax, col in zip(axes[:, 0], value_cols, strict=True):
        for queue, g in pdf.groupby("queue"):
            ax.plot(g["minute"], g[col], marker="o", markersize=3, label=str(queue))
        ax.set_ylabel(col)
        ax.grid(alpha=0.3)
    axes[0, 0].set_title(title)
    axes[0, 0].legend(fontsize=7, loc="upper left", ncol=2)
    axes[-1, 0].set_xlabel(ylabel)
    fig.autofmt_xdate()
    return _save(fig, path)


def throughput_chart(pdf: Any, path: Path) -> Path | None:
    return _per_queue_lines(pdf, ["sent", "deleted"], "Messages per minute", "minute (UTC)", path)


def depth_chart(pdf: Any, path: Path) -> Path | None:
    return _per_queue_lines(pdf, ["depth", "oldest_age_s"], "Queue depth and age of the oldest message",
                            "minute (UTC)", path)


def _bars(pdf: Any, cols: list[str], title: str, ylabel: str, path: Path) -> Path | None:
    if pdf.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    n = len(cols)
    width = 0.8 / n
    xs = range(len(pdf))
    for i, col in enumerate(cols):
        ax.bar([x + i * width for x in xs], pdf[col].fillna(0), width, label=col)
    ax.set_xticks([x + width * (n - 1) / 2 for x in xs])
    ax.set_xticklabels([str(q) for q in pdf["queue"]], fontsize=7, rotation=15)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def latency_chart(pdf: Any, path: Path) -> Path | None:
    return _bars(pdf, ["p50_ms", "p90_ms", "p99_ms"], "End-to-end latency (send -> delete)", "ms", path)


def deliveries_chart(pdf: Any, path: Path) -> Path | None:
    return _bars(pdf, ["sent", "receives", "redeliveries", "deleted", "dlq_moves"],
                 "Deliveries per queue", "records", path)
