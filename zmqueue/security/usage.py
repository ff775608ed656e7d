"""Usage records for billing: requests and bytes per (client identity, queue).

The host counts on its request loop and appends the deltas to
``<data dir>/usage.jsonl`` every ``flush_interval_ms`` and when it stops,
one JSON object per (identity, queue) and interval, fsynced::

    {"t0": ms, "t1": ms, "node": "h1", "identity": "alice", "queue": "q",
     "requests": 12, "bytes_in": 3400, "bytes_out": 120}

Append-only and fsynced, so a crash loses at most the current interval.
:func:`aggregate` sums records over any set of files (``zmqueue usage``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

USAGE_FILE = "usage.jsonl"
FLUSH_INTERVAL_MS = 10_000
MAX_KEYS = 100_000


class UsageBook:
    def __init__(self, data_dir: Path, node: str, flush_interval_ms: int = FLUSH_INTERVAL_MS) -> None:
        self.path = Path(data_dir) / USAGE_FILE
        self.node = node
        self.flush_interval_ms = flush_interval_ms
        self.rows: dict[tuple[str, str], list[int]] = {}
        self.since_ms = int(time.time() * 1000)
        self.next_flush_ms = self.since_ms + flush_interval_ms

    def add(self, identity: str, queue: str, requests: int, bytes_in: int, bytes_out: int) -> None:
        row = self.rows.get((identity, queue))
        if row is None:
            if len(self.rows) >= MAX_KEYS:
                self.flush(int(time.time() * 1000))
            row = self.rows[(identity, queue)] = [0, 0, 0]
        row[0] += requests
        row[1] += bytes_in
        row[2] += bytes_out

    def maybe_flush(self, now_ms: int) -> None:
        if now_ms >= self.next_flush_ms:
            self.flush(now_ms)

    def flush(self, now_ms: int) -> None:
        self.next_flush_ms = now_ms + self.flush_interval_ms
        if not self.rows:
            self.since_ms = now_ms
            return
        lines = [json.dumps({"t0": self.since_ms, "t1": now_ms, "node": self.node, "identity": ident,
                             "queue": q, "requests": r[0], "bytes_in": r[1], "bytes_out": r[2]},
                            separators=(",", ":")) + "\n"
                 for (ident, q), r in sorted(self.rows.items())]
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, "".join(lines).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot write usage records to %s: %s (kept in memory)", self.path, exc)
            return
        self.rows.clear()
        self.since_ms = now_ms


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(sorted(p.rglob(USAGE_FILE)))
    return out


COUNTS = ("requests", "bytes_in", "bytes_out")


def aggregate(files: Iterable[Path], since_ms: int = 0) -> list[dict[str, Any]]:
    """Sum of the records (ending after ``since_ms``) per (identity, queue).
    A line that is not such a record (a torn last line after a crash, an
    edited or damaged file) is skipped, and the skips logged per file."""
    total: dict[tuple[str, str], list[int]] = {}
    for f in files:
        skipped = 0
        with open(f, errors="replace") as fh:
            for line in fh:
                rec = _record(line)
                if rec is None:
                    skipped += bool(line.strip())
                    continue
                if rec["t1"] < since_ms:
                    continue
                row = total.setdefault((rec["identity"], rec["queue"]), [0, 0, 0])
                for i, k in enumerate(COUNTS):
                    row[i] += rec[k]
        if skipped:
            log.warning("%s: skipped %d line(s) that are not usage records", f, skipped)
    return [{"identity": i, "queue": q, "requests": r[0], "bytes_in": r[1], "bytes_out": r[2]}
            for (i, q), r in sorted(total.items())]


def _record(line: str) -> dict[str, Any] | None:
    """A usage record with whole-number counts and end time, or None."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    out: dict[str, Any] = {"identity": str(rec.get("identity")), "queue": str(rec.get("queue"))}
    for k in ("t1", *COUNTS):
        v = rec.get(k, 0)
        if type(v) is not int or v < 0:
            return None
        out[k] = v
    return out
