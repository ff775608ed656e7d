"""``spark.read.format("zmqueue")``: the segment format as a PySpark data source.

One Spark partition per read unit (a segment file, or a block range of a large
one), or with option ``minPartitions`` the log cut into that many equal
partitions or a multiple (analytics.partitions; the jobs pass the session's
parallelism); each yields Arrow batches of the records of consecutive blocks
(``batchRows``, 16 Ki rows). A narrower schema given with
``.schema("queue STRING, time TIMESTAMP")`` reads only those columns (Python
data sources have no column pruning, so the jobs pass the columns they use).
Filters are options (``since``, ``until``, ``queues``, ``types``), never pushed
down: ``pushFilters`` is deliberately not implemented (docs/ANALYTICS.md).
The never-null columns may be declared ``NOT NULL`` (analytics.schema.ddl does);
the batches then carry the same nullability.

The first read in a Python worker freezes the objects alive then (see
:func:`freeze_worker_heap`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from analytics.batches import read_unit
from analytics.layout import ReadUnit
from analytics.options import parse_options
from analytics.partitions import equal_partitions, partition_count, unit_bytes
from analytics.reader import read_options, units_for
from analytics.schema import SQL_TYPES, check_not_null, ddl, default_columns

FORMAT = "zmqueue"


def freeze_worker_heap() -> None:
    """Once per process: collect, then move every object alive (the modules of pyspark,
    pyarrow, numpy and this package: ~50k objects) to the collector's permanent generation.

    PySpark's worker daemon runs a full ``gc.collect()`` after every task it
    serves (``pyspark/daemon.py``); walking those objects each time was ~20% of
    the worker's CPU in the benchmark (docs/perf/analytics.md). Objects created
    afterwards are collected as before; frozen ones are still freed by reference
    counting, only cycles among them would stay (modules do not go away).
    """
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


class ZmqueueDataSource(DataSource):
    """Rows of the zmqueue segment logs (schema: analytics.schema.COLUMNS)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return ddl(default_columns(parse_options(self.options).payload))

    def reader(self, schema: StructType) -> ZmqueueReader:
        not_null = frozenset(f.name for f in schema.fields if not f.nullable)
        columns = [f.name for f in schema.fields]
        ddl(columns)  # unknown columns first: they have no type to compare
        for f in schema.fields:  # (a wrong type failed later, in a worker, with Spark's traceback)
            want = SQL_TYPES[f.name].lower().replace(" ", "")
            if f.dataType.simpleString() != want:
                raise ValueError(f"zmqueue column {f.name!r} is {want.upper()}, not "
                                 f"{f.dataType.simpleString().upper()}: fix the schema")
        return ZmqueueReader(dict(self.options), columns, not_null)


class ZmqueueReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: list[str],
                 not_null: frozenset[str] = frozenset()) -> None:
        self.options = options
        ddl(columns)  # refuses unknown columns early, on the driver
        check_not_null(not_null)
        opts = parse_options(options)  # bad option values too (a worker would fail on them later)
        if opts.key_dir is not None and not Path(opts.key_dir).is_dir():
            raise ValueError(f"option keyDir {opts.key_dir!r}: no such key directory (the hosts' "
                             "--key-dir, holding <queue>.key files)")
        self.columns = columns
        self.not_null = not_null

    def partitions(self) -> Sequence[InputPartition]:
        opts = parse_options(self.options)
        units = units_for(opts)
        if opts.min_partitions is None:
            return [InputPartition((u,)) for u in units]
        total = sum(unit_bytes(u) for u in units)
        count = partition_count(total, opts.split_bytes, opts.min_partitions)
        return [InputPartition(tuple(p)) for p in equal_partitions(units, count)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        ropts = read_options(parse_options(self.options), self.columns, self.not_null)
        units = partition.value or ()  # None: PySpark's one partition when we planned none
        for unit in units:
            assert isinstance(unit, ReadUnit), f"unexpected partition {partition!r}"
            yield from read_unit(unit, ropts)
