"""The schema of ``spark.read.format("zmqueue")``: one row per log record.

Every column is documented in docs/ANALYTICS.md. The Arrow schema here and
the Spark DDL must agree exactly, nullability included (Spark checks Arrow
batches against it).

The columns every row has, a corrupt block's row included (:data:`NEVER_NULL`),
are declared ``NOT NULL`` in the DDL the jobs and the default schema use:
Spark then copies them out of the Arrow batches without a null check and
hashes and compares them as grouping keys without one (docs/perf/analytics.md).
A schema given by hand may declare them nullable; any other column declared
``NOT NULL`` is refused.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

# (name, arrow type, spark SQL type, meaning)
COLUMNS: list[tuple[str, pa.DataType, str, str]] = [
    ("host", pa.string(), "STRING", "node name of the host whose log this is (host.json, else dir name)"),
    ("queue", pa.string(), "STRING", "queue name"),
    ("partition", pa.int32(), "INT", "partition number"),
    ("origin", pa.string(), "STRING", "log stream of the partition (origin host); '' in the flat layout"),
    ("record_type", pa.string(), "STRING",
     "MESSAGE, DELETE, VISIBILITY, DLQ_MOVE, PURGE, EPOCH; null if corrupt"),
    ("seq", pa.int64(), "BIGINT", "record sequence number in its stream (queue, partition, origin)"),
    ("target_seq", pa.int64(), "BIGINT", "seq of the message acted on (PURGE: highest seq purged)"),
    ("epoch", pa.int64(), "BIGINT", "leadership term that wrote it (0: storage engine alone)"),
    ("message_id", pa.string(), "STRING", "32 hex digits, as the client shows it"),
    ("time", TS, "TIMESTAMP", "MESSAGE: enqueue time; others: time of the action (delete, receive...)"),
    ("visible_at", TS, "TIMESTAMP", "MESSAGE: first visible; VISIBILITY: new deadline (null = now)"),
    ("receive_count", pa.int32(), "INT", "VISIBILITY: count after it; DELETE/DLQ_MOVE: the receipt's"),
    ("payload_size", pa.int32(), "INT", "MESSAGE: body bytes"),
    ("attributes_size", pa.int32(), "INT", "MESSAGE: attribute blob bytes"),
    ("encrypted", pa.bool_(), "BOOLEAN", "MESSAGE: body or attributes sealed at rest (see option keyDir)"),
    ("group_id", pa.string(), "STRING", "MESSAGE: FIFO message group id"),
    ("dedup_id", pa.string(), "STRING", "MESSAGE: FIFO deduplication id"),
    ("client_id", pa.string(), "STRING", "MESSAGE: producer identity (blob key cid), if recorded"),
    ("dlq_source", pa.string(), "STRING", "MESSAGE in a dead-letter queue: the queue it came from"),
    ("carried_receive_count", pa.int32(), "INT", "MESSAGE in a dead-letter queue: receives in the source"),
    ("attributes", pa.map_(pa.string(), pa.string()), "MAP<STRING, STRING>",
     "MESSAGE: user attributes, values as strings (bytes as hex)"),
    ("segment", pa.string(), "STRING", "segment file name"),
    ("block_offset", pa.int64(), "BIGINT", "byte offset of the record's block in the segment file"),
    ("corrupt", pa.string(), "STRING", "null, or why this block was unreadable (one row per bad block)"),
]
PAYLOAD_COLUMN = ("payload", pa.binary(), "BINARY", "MESSAGE: the body; only with option payload=true")

# every row has these, a corrupt block's row included (analytics.batches.bad_block_batch)
NEVER_NULL = frozenset({"host", "queue", "partition", "origin", "segment", "block_offset"})

ARROW_TYPES = {name: t for name, t, _, _ in [*COLUMNS, PAYLOAD_COLUMN]}
SQL_TYPES = {name: s for name, _, s, _ in [*COLUMNS, PAYLOAD_COLUMN]}
ALL_COLUMNS = [c[0] for c in COLUMNS]


def ddl(columns: list[str]) -> str:
    """Spark DDL of the given columns (in that order); the :data:`NEVER_NULL` ones ``NOT NULL``."""
    unknown = [c for c in columns if c not in SQL_TYPES]
    if unknown:
        raise ValueError(f"unknown zmqueue columns {unknown}; known: {[*ALL_COLUMNS, 'payload']}")
    return ", ".join(f"`{c}` {SQL_TYPES[c]}{' NOT NULL' if c in NEVER_NULL else ''}" for c in columns)


def check_not_null(not_null: frozenset[str]) -> None:
    """Refuse ``NOT NULL`` on a column that can be null (a given schema is trusted by Spark)."""
    bad = sorted(not_null - NEVER_NULL)
    if bad:
        raise ValueError(f"zmqueue columns {bad} can be null (e.g. on a corrupt block's row): declare them "
                         f"nullable; only {sorted(NEVER_NULL)} may be NOT NULL")


def arrow_schema(columns: list[str], not_null: frozenset[str] = frozenset()) -> pa.Schema:
    """The Arrow schema of the given columns; those in ``not_null`` non-nullable."""
    return pa.schema([pa.field(c, ARROW_TYPES[c], nullable=c not in not_null) for c in columns])


def default_columns(payload: bool) -> list[str]:
    return [*ALL_COLUMNS, "payload"] if payload else list(ALL_COLUMNS)
