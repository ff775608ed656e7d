"""The reader without Spark: plan read units and produce Arrow batches or a table.

Used by the Spark data source (one unit per Spark partition), by tests and by
tooling that wants a quick look at a small log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from analytics.batches import ReadOptions, read_unit
from analytics.layout import ReadUnit, plan_units
from analytics.options import SourceOptions, parse_options
from analytics.schema import arrow_schema, default_columns
from analytics.sealed import KeyRing


def units_for(opts: SourceOptions) -> list[ReadUnit]:
    return plan_units(opts.paths, opts.split_bytes, set(opts.queues) if opts.queues else None)


def read_options(opts: SourceOptions, columns: list[str] | None = None,
                 not_null: frozenset[str] = frozenset()) -> ReadOptions:
    cols = columns if columns is not None else default_columns(opts.payload)
    keys = KeyRing(opts.key_dir) if opts.key_dir else None
    return ReadOptions(cols, opts.since_ms, opts.until_ms, opts.types, keys, opts.batch_rows, not_null)


def iter_batches(paths: Iterable[str | Path], columns: list[str] | None = None,
                 **options: str) -> Iterator[pa.RecordBatch]:
    """Every batch under ``paths``; ``options`` as for the data source (see analytics.options)."""
    opts = parse_options({**options, "paths": ",".join(str(p) for p in paths)})
    ropts = read_options(opts, columns)
    for unit in units_for(opts):
        yield from read_unit(unit, ropts)


def read_table(paths: Iterable[str | Path], columns: list[str] | None = None, **options: str) -> pa.Table:
    """All records under ``paths`` as one Arrow table (small logs only)."""
    cols = columns if columns is not None else default_columns(options.get("payload") == "true")
    return pa.Table.from_batches(list(iter_batches(paths, cols, **options)), schema=arrow_schema(cols))
