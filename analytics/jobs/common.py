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


REPLICA_COLUMNS = ("host", "seq", "epoch", "segment", "block_offset")  # what one_replica reads


def one_replica(df: DataFrame) -> DataFrame:
    """One copy of each record of every stream (queue, partition, origin), from
    whichever replica (``host``) holds it; corrupt-block rows dropped.

    When several replicas' logs are read together, every record appears once
    per replica that still holds it; counting jobs run on this view so each is
    counted once. Replicas do not hold the same range: compaction removes a
    copy's older files on its own schedule, a lagging copy lacks the newest
    records, a corrupt block or a missing file leaves a hole in one copy only.
    So each seq is taken from any copy that has it, never the whole stream
    from one copy (which dropped what only a less advanced replica still held).

    Copies of a seq can differ after a takeover: a writer killed with records
    no other replica had leaves them as a diverged tail of its term, which its
    copy cuts when it rejoins. A record of a later term (``epoch``) wins: a
    record is dropped when a later term holds a record at its seq or before it
    on any replica (from its first record, the new writer's log replaces the
    older term's), so a diverged tail does not count, however long.

    Done on seq ranges, not per record: records are grouped by block (a
    block's seqs are consecutive), consecutive blocks of one file and term
    merged into runs, and each seq given to the first run (by first seq, then
    host) that holds it; the records are then kept by a broadcast join on
    those runs (a few per file), so no record is shuffled.
    """
    from pyspark.sql.window import Window

    lacking = [c for c in REPLICA_COLUMNS if c not in df.columns]
    if lacking:
        raise ValueError(f"one_replica needs the columns {', '.join(lacking)}")
    recs = good(df)
    run_key = [*STREAM, "host", "segment", "epoch"]
    blocks = recs.groupBy(*run_key, "block_offset").agg(F.min("seq").alias("lo"), F.max("seq").alias("hi"))
    # the first seq of any later term on any replica: an older term's record there or past it is cut
    later = Window.partitionBy(*STREAM).orderBy("epoch").rangeBetween(1, Window.unboundedFollowing)
    blocks = (blocks.withColumn("hi", F.least("hi", F.min("lo").over(later) - 1))  # (least skips a null)
              .where(F.col("lo") <= F.col("hi")))
    in_file = Window.partitionBy(*run_key).orderBy("lo")
    gap = F.coalesce(F.col("lo") != F.lag("hi").over(in_file) + 1, F.lit(True)).cast("int")
    runs = (blocks.withColumn("run", F.sum(gap).over(in_file.rowsBetween(Window.unboundedPreceding, 0)))
            .groupBy(*run_key, "run").agg(F.min("lo").alias("lo"), F.max("hi").alias("hi")))
    before = (Window.partitionBy(*STREAM).orderBy("lo", F.col("hi").desc(), "host", "segment", "epoch")
              .rowsBetween(Window.unboundedPreceding, -1))
    keep = (runs.withColumn("lo", F.greatest("lo", F.coalesce(F.max("hi").over(before) + 1, F.col("lo"))))
            .where(F.col("lo") <= F.col("hi")).select(*run_key, "lo", "hi"))
    r, k = recs.alias("r"), F.broadcast(keep).alias("k")
    on = [F.col(f"r.{c}") == F.col(f"k.{c}") for c in run_key]
    on.append(F.col("r.seq").between(F.col("k.lo"), F.col("k.hi")))
    return r.join(k, on, "left_semi")


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
