"""Replication lag between the replicas of a partition.

Every replica of a partition keeps a copy of each of its log streams (one per
origin host) with the same records (epoch, seq) with the time the writer
gave them. For each partition and replica host: the newest record it holds,
how many seqs it is behind the most advanced replica, and how far behind in
time (writer time of the newest record of the best replica minus this one's).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from analytics.jobs.common import good


def replication_lag(df: DataFrame) -> DataFrame:
    """queue, partition, origin, host, replicas, max_epoch, max_seq, records, lag_records, lag_ms."""
    per = (good(df).groupBy("queue", "partition", "origin", "host")
           .agg(F.max("epoch").alias("max_epoch"), F.max("seq").alias("max_seq"),
                F.count(F.lit(1)).alias("records"), F.max("time").alias("newest")))
    w = Window.partitionBy("queue", "partition", "origin")
    lag_ms = (F.unix_micros(F.max("newest").over(w)) - F.unix_micros("newest")) / 1000.0
    return (per.withColumn("replicas", F.count(F.lit(1)).over(w))
            .withColumn("lag_records", F.max("max_seq").over(w) - F.col("max_seq"))
            .withColumn("lag_ms", lag_ms)
            .select("queue", "partition", "origin", "host", "replicas", "max_epoch", "max_seq", "records",
                    "lag_records", "lag_ms").orderBy("queue", "partition", "origin", "host"))


def epochs(df: DataFrame) -> DataFrame:
    """queue, partition, origin, host, epoch, first_seq, last_seq, records: the terms each replica saw."""
    return (good(df).groupBy("queue", "partition", "origin", "host", "epoch")
            .agg(F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
                 F.count(F.lit(1)).alias("records")).orderBy("queue", "partition", "origin", "host", "epoch"))
