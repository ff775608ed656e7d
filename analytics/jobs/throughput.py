"""Throughput per queue per minute: messages sent, received, deleted, dead-lettered."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.jobs.common import good, is_type, minute, receives


def messages_per_minute(df: DataFrame) -> DataFrame:
    """The benchmark aggregation: rows per queue per minute of a MESSAGE-only frame
    (read with option ``types=MESSAGE``)."""
    return df.groupBy("queue", minute()).agg(F.count(F.lit(1)).alias("sent"))


def throughput(df: DataFrame) -> DataFrame:
    """queue, minute, sent, sent_bytes, received, deleted, dead_lettered (per minute)."""
    df = good(df)
    sent = (df.where(is_type("MESSAGE")).groupBy("queue", minute())
            .agg(F.count(F.lit(1)).alias("sent"), F.sum("payload_size").cast("long").alias("sent_bytes")))
    recv = receives(df).groupBy("queue", minute()).agg(F.count(F.lit(1)).alias("received"))
    gone = (df.where(is_type("DELETE") | is_type("DLQ_MOVE")).groupBy("queue", minute())
            .agg(F.count(F.when(is_type("DELETE"), 1)).alias("deleted"),
                 F.count(F.when(is_type("DLQ_MOVE"), 1)).alias("dead_lettered")))
    out = sent.join(recv, ["queue", "minute"], "full").join(gone, ["queue", "minute"], "full")
    return out.fillna(0).orderBy("queue", "minute")
