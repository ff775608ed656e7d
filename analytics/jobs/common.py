"""Loading the records DataFrame the jobs share, and small helpers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from analytics.layout import find_host_dirs
from analytics.schema import ddl

# the columns the jobs read (the source reads only what the schema names)
JOB_COLUMNS = ["host", "queue", "partition", "origin", "record_type", "seq", "target_seq", "epoch",
               "message_id", "time", "receive_count", "payload_size", "client_id", "dlq_source",
               "carried_receive_count", "segment", "block_offset", "corrupt"]


def load_records(spark: Any, paths: Sequence[str], columns: Sequence[str] = JOB_COLUMNS,
                 **options: str) -> DataFrame:
    """The log records under ``paths`` (host data dirs, or parents of them), in as many
    equal partitions as the session runs tasks at once (option ``minPartitions``,
    unless given: see analytics.partitions)."""
    reader = spark.read.format("zmqueue").schema(ddl(list(columns)))
    parallelism = default_parallelism(spark)
    if parallelism is not None and "minPartitions" not in options:
        reader = reader.option("minPartitions", str(parallelism))
    for k, v in options.items():
        reader = reader.option(k, v)
    df: DataFrame = reader.load(list(paths))
    return df


def default_parallelism(spark: Any) -> int | None:
    """How many tasks the session runs at once, or None where it cannot tell (Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except NotImplementedError:  # a Spark Connect session has no SparkContext
        return None


STREAM = ["queue", "partition", "origin"]  # one log stream: its seqs are unique per replica


def host_count(paths: Sequence[str]) -> int:
    return len(find_host_dirs(paths))


def good(df: DataFrame) -> DataFrame:
    """Records of sound blocks (corrupt-block rows dropped)."""
    return df.where(F.col("corrupt").isNull()) if "corrupt" in df.columns else df


def one_replica(df: DataFrame) -> DataFrame:
    """For each stream, only the log of its soundest, most advanced replica
    (fewest corrupt blocks, then highest seq; ties: host name).

    When several replicas' logs are read together, every record appears once
    per replica; counting jobs run on this view so each is counted once. A
    copy with a corrupt block lacks that block's records, so an intact copy
    of the same stream is preferred to it.
    """
    from pyspark.sql.window import Window

    if "corrupt" in df.columns:
        per = df.groupBy(*STREAM, "host").agg(
            F.max(F.when(F.col("corrupt").isNull(), F.col("seq"))).alias("top"),
            F.count(F.col("corrupt")).alias("bad"))
        order = [F.col("bad").asc(), F.col("top").desc_nulls_last(), F.col("host")]
    else:
        per = df.groupBy(*STREAM, "host").agg(F.max("seq").alias("top"))
        order = [F.col("top").desc(), F.col("host")]
    w = Window.partitionBy(*STREAM).orderBy(*order)
    best = per.withColumn("r", F.row_number().over(w)).where(F.col("r") == 1).select(*STREAM, "host")
    return good(df).join(F.broadcast(best), [*STREAM, "host"], "left_semi")


def minute(col: str = "time") -> Column:
    return F.date_trunc("minute", F.col(col)).alias("minute")


def is_type(name: str) -> Column:
    return F.col("record_type") == F.lit(name)


def receives(df: DataFrame) -> DataFrame:
    """One row per receive: the first VISIBILITY record of each receive count of a message.

    (A receive raises the count; a visibility change repeats it.)
    """
    return (good(df).where(is_type("VISIBILITY") & (F.col("receive_count") > 0))
            .groupBy(*STREAM, "target_seq", "receive_count")
            .agg(F.min("time").alias("time")))
