"""``spark.read.format("zmqueue")``: the segment format as a PySpark data source.

One Spark partition per read unit (a segment file, or a block range of a large
one); each yields Arrow batches, one per block. A narrower schema given with
``.schema("queue STRING, time TIMESTAMP")`` reads only those columns (Python
data sources have no column pruning, so the jobs pass the columns they use).
Filters are options (``since``, ``until``, ``queues``, ``types``), never pushed
down: ``pushFilters`` is deliberately not implemented (docs/ANALYTICS.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from analytics.batches import read_unit
from analytics.layout import ReadUnit
from analytics.options import parse_options
from analytics.reader import read_options, units_for
from analytics.schema import ddl, default_columns

FORMAT = "zmqueue"


class ZmqueueDataSource(DataSource):
    """Rows of the zmqueue segment logs (schema: analytics.schema.COLUMNS)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return ddl(default_columns(parse_options(self.options).payload))

    def reader(self, schema: StructType) -> ZmqueueReader:
        return ZmqueueReader(dict(self.options), [f.name for f in schema.fields])


class ZmqueueReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: list[str]) -> None:
        self.options = options
        ddl(columns)  # refuses unknown columns early, on the driver
        self.columns = columns

    def partitions(self) -> Sequence[InputPartition]:
        units = units_for(parse_options(self.options))
        return [InputPartition(u) for u in units]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        ropts = read_options(parse_options(self.options), self.columns)
        unit = partition.value
        assert isinstance(unit, ReadUnit), f"unexpected partition {partition!r}"
        yield from read_unit(unit, ropts)
