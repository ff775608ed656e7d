"""End-to-end latency (send -> delete) per queue: exact percentiles in milliseconds."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.jobs.common import good, is_type

PERCENTILES = (0.5, 0.9, 0.99)
KEY = ["queue", "partition", "origin"]  # a stream (one copy of it: one_replica)


def message_latencies(df: DataFrame) -> DataFrame:
    """Deleted messages: queue, partition, origin, seq, message_id, sent, deleted, latency_ms,
    receive_count."""
    df = good(df)
    sent = df.where(is_type("MESSAGE")).select(*KEY, "seq", "message_id", F.col("time").alias("sent"))
    dels = (df.where(is_type("DELETE"))
            .select(*KEY, F.col("target_seq").alias("seq"), F.col("time").alias("deleted"), "receive_count"))
    j = sent.join(dels, [*KEY, "seq"])
    ms = (F.unix_micros("deleted") - F.unix_micros("sent")) / 1000.0
    return j.withColumn("latency_ms", ms)


def latency(df: DataFrame) -> DataFrame:
    """queue, deleted (count), p50_ms, p90_ms, p99_ms, max_ms, mean_ms."""
    lat = message_latencies(df)
    pct = F.percentile("latency_ms", F.array(*[F.lit(p) for p in PERCENTILES]))
    agg = lat.groupBy("queue").agg(F.count(F.lit(1)).alias("deleted"), pct.alias("p"),
                                   F.max("latency_ms").alias("max_ms"), F.avg("latency_ms").alias("mean_ms"))
    cols = [F.col("p")[i].alias(f"p{round(p * 100)}_ms") for i, p in enumerate(PERCENTILES)]
    return agg.select("queue", "deleted", *cols, "max_ms", "mean_ms").orderBy("queue")
