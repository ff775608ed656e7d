"""Reader options, parsed from the string map Spark hands a data source.

| option | meaning | default |
|---|---|---|
| ``path`` / ``paths`` | data directories (``load(p)`` / ``load([p, q])``, or comma-separated) | required |
| ``since`` / ``until`` | time range of ``time``: Unix ms or ISO-8601 (UTC if no zone), half-open | all |
| ``queues`` | comma-separated queue names | all |
| ``types`` | comma-separated record types (``MESSAGE,DELETE``) | all |
| ``payload`` | ``true`` adds the ``payload`` column | false |
| ``keyDir`` | key directory (``<queue>.key`` files) to open payloads sealed at rest | none |
| ``splitBytes`` | files larger than this are read as several block ranges | 128 MiB |
| ``batchRows`` | consecutive blocks are combined into Arrow batches of at least this many rows | 16384 |
| ``minPartitions`` | this many equal partitions or a multiple (analytics.partitions) | one per file |

Filters are passed as options on purpose: Spark's Python data source filter
pushdown returned wrong results in PySpark 4.3 (see docs/ANALYTICS.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from analytics.layout import DEFAULT_SPLIT_BYTES
from analytics.segments import RECORD_TYPES

DEFAULT_BATCH_ROWS = 16384

TYPE_CODES = {v: k for k, v in RECORD_TYPES.items()}


@dataclass(frozen=True)
class SourceOptions:
    paths: list[str]
    since_ms: int | None = None
    until_ms: int | None = None
    queues: frozenset[str] | None = None
    types: frozenset[int] | None = None
    payload: bool = False
    split_bytes: int = DEFAULT_SPLIT_BYTES
    key_dir: str | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS
    min_partitions: int | None = None


def parse_time_ms(value: str) -> int:
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def time_option(name: str, value: str) -> int:
    """:func:`parse_time_ms`, or ValueError naming ``name`` (an option, or the
    CLI's flag) and the forms it takes."""
    try:
        return parse_time_ms(value)
    except ValueError:
        raise ValueError(f"{name} {value!r} is not a time: give ISO-8601 (2026-11-29T10:00, "
                         "2026-11-29T10:00:00Z) or Unix milliseconds") from None


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"option {name} {value!r} is not a whole number") from None


def _bool(name: str, value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} {value!r} must be true or false")
    return value.strip().lower() == "true"


def _list(value: str | None) -> list[str]:
    return [s.strip() for s in (value or "").split(",") if s.strip()]


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    opts = {k.lower(): v for k, v in options.items()}
    paths: list[str] = []
    for key in ("path", "paths"):
        raw = opts.get(key) or ""
        paths += [str(p) for p in json.loads(raw)] if raw.startswith("[") else _list(raw)
    if not paths:
        raise ValueError("zmqueue data source: give a data directory with load(path) or option paths")
    types = None
    if opts.get("types"):
        bad = [t for t in _list(opts["types"]) if t.upper() not in TYPE_CODES]
        if bad:
            raise ValueError(f"unknown record types {bad}; known: {sorted(TYPE_CODES)}")
        types = frozenset(TYPE_CODES[t.upper()] for t in _list(opts["types"]))
    split = _int("splitBytes", opts["splitbytes"]) if opts.get("splitbytes") else DEFAULT_SPLIT_BYTES
    if split < 1024 * 1024:
        raise ValueError(f"splitBytes {split} is below the 1 MiB minimum")
    batch_rows = _int("batchRows", opts["batchrows"]) if opts.get("batchrows") else DEFAULT_BATCH_ROWS
    if batch_rows < 1:
        raise ValueError(f"batchRows {batch_rows} must be at least 1")
    min_partitions = _int("minPartitions", opts["minpartitions"]) if opts.get("minpartitions") else None
    if min_partitions is not None and min_partitions < 1:
        raise ValueError(f"minPartitions {min_partitions} must be at least 1")
    return SourceOptions(
        paths=paths,
        since_ms=time_option("option since", opts["since"]) if opts.get("since") else None,
        until_ms=time_option("option until", opts["until"]) if opts.get("until") else None,
        queues=frozenset(_list(opts["queues"])) if opts.get("queues") else None,
        types=types,
        payload=_bool("payload", opts.get("payload", "false")),
        split_bytes=split,
        key_dir=opts.get("keydir") or None,
        batch_rows=batch_rows,
        min_partitions=min_partitions,
    )
