"""Queue depth and the age of the oldest message, sampled at every minute boundary.

A message is stored from its MESSAGE record until the first DELETE, DLQ_MOVE
or covering PURGE after it (retention expiry is not logged, so an expired
message counts until the end of the log). Only messages alive across a minute
boundary are expanded, one row per boundary they cross, so a healthy queue
costs little; a long backlog costs messages x minutes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.jobs.common import good, is_type

KEY = ["queue", "partition", "origin"]  # a stream (one copy of it: one_replica)


def lifetimes(df: DataFrame) -> DataFrame:
    """queue, partition, origin, seq, sent, removed (null = still stored at the end of the log)."""
    df = good(df)
    sent = df.where(is_type("MESSAGE")).select(*KEY, "seq", F.col("time").alias("sent"))
    gone = (df.where(is_type("DELETE") | is_type("DLQ_MOVE"))
            .groupBy(*KEY, F.col("target_seq").alias("seq")).agg(F.min("time").alias("gone")))
    purges = df.where(is_type("PURGE")).select(*KEY, F.col("target_seq").alias("upto"),
                                               F.col("time").alias("purged"))
    s = sent.join(gone, [*KEY, "seq"], "left").alias("s")
    p = purges.alias("p")
    cond = [F.col(f"s.{k}") == F.col(f"p.{k}") for k in KEY] + [F.col("p.upto") >= F.col("s.seq")]
    purged = (s.join(p, cond, "left").groupBy(*[F.col(f"s.{k}") for k in KEY], "s.seq", "s.sent", "s.gone")
              .agg(F.min("p.purged").alias("purged")))
    return purged.select(*KEY, "seq", "sent", F.least("gone", "purged").alias("removed"))


def depth(df: DataFrame) -> DataFrame:
    """queue, minute, depth, oldest_age_s — at each minute boundary of the queue's log."""
    life = lifetimes(df)
    bounds = good(df).groupBy("queue").agg(F.min("time").alias("t0"), F.max("time").alias("t1"))
    grid = bounds.select("queue", F.explode(F.sequence(
        F.date_trunc("minute", "t0") + F.expr("INTERVAL 1 MINUTE"),
        F.date_trunc("minute", "t1") + F.expr("INTERVAL 1 MINUTE"),
        F.expr("INTERVAL 1 MINUTE"))).alias("minute"))
    first = F.date_trunc("minute", "sent") + F.expr("INTERVAL 1 MINUTE")
    last = F.coalesce(F.col("removed") - F.expr("INTERVAL 1 MICROSECOND"), F.col("t1"))
    alive = (life.join(bounds, "queue")
             .withColumn("first", first)
             .withColumn("last", F.date_trunc("minute", last) + F.expr("INTERVAL 1 MINUTE"))
             .withColumn("last", F.least("last", F.date_trunc("minute", "t1") + F.expr("INTERVAL 1 MINUTE")))
             .where(F.col("first") <= F.col("last"))
             .where(F.col("removed").isNull() | (F.col("removed") > F.col("first"))))
    crossed = alive.select("queue", "sent", "removed", F.explode(
        F.sequence("first", "last", F.expr("INTERVAL 1 MINUTE"))).alias("minute"))
    crossed = crossed.where(F.col("removed").isNull() | (F.col("removed") > F.col("minute")))
    agg = crossed.groupBy("queue", "minute").agg(F.count(F.lit(1)).alias("depth"),
                                                 F.min("sent").alias("oldest"))
    out = grid.join(agg, ["queue", "minute"], "left")
    age = (F.unix_micros("minute") - F.unix_micros("oldest")) / 1e6
    return (out.select("queue", "minute", F.coalesce("depth", F.lit(0)).alias("depth"),
                       F.coalesce(age, F.lit(0.0)).alias("oldest_age_s")).orderBy("queue", "minute"))
