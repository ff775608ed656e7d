"""Replication lag between the replicas of a partition.

Every replica logs the same records (epoch, seq) with the time the writer
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
    """queue, partition, host, replicas, max_epoch, max_seq, records, lag_records, lag_ms."""
    per = (good(df).groupBy("queue", "partition", "host")
           .agg(F.max("epoch").alias("max_epoch"), F.max("seq").alias("max_seq"),
                F.count(F.lit(1)).alias("records"), F.max("time").alias("newest")))
    w = Window.partitionBy("queue", "partition")
    lag_ms = (F.unix_micros(F.max("newest").over(w)) - F.unix_micros("newest")) / 1000.0
    return (per.withColumn("replicas", F.count(F.lit(1)).over(w))
            .withColumn("lag_records", F.max("max_seq").over(w) - F.col("max_seq"))
            .withColumn("lag_ms", lag_ms)
            .select("queue", "partition", "host", "replicas", "max_epoch", "max_seq", "records",
                    "lag_records", "lag_ms").orderBy("queue", "partition", "host"))


def epochs(df: DataFrame) -> DataFrame:
    """queue, partition, host, epoch, first_seq, last_seq, records: the terms each replica saw."""
    return (good(df).groupBy("queue", "partition", "host", "epoch")
            .agg(F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
                 F.count(F.lit(1)).alias("records")).orderBy("queue", "partition", "host", "epoch"))
