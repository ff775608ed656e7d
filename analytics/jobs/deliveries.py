"""Receive counts, redeliveries and dead-letter moves per queue."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.jobs.common import good, is_type, receives


def with_dlq_source(df: DataFrame) -> DataFrame:
    """``df`` with each MESSAGE's ``dlq_source`` filled where the log cannot say it.

    A dead letter keeps its message id, so a MESSAGE whose ``dlq_source`` is null
    (sealed at rest and read without ``keyDir``) but whose id a DLQ_MOVE of another
    queue names came from that queue (when a dead-letter queue's own dead letter moved
    on, the moves' order tells which queue took it from which). A redrive sends new
    ids, and a plaintext dead letter always carries ``src``, so nothing else matches.
    """
    moves = df.where(is_type("DLQ_MOVE")).groupBy("message_id").agg(F.transform(
        F.array_sort(F.collect_set(F.struct(F.col("time").alias("t"), F.col("queue").alias("q")))),
        lambda m: m["q"]).alias("_movers"))
    unknown = is_type("MESSAGE") & F.col("dlq_source").isNull()
    # the queues that moved this id on, in time order: a queue among them took it from the
    # one before (the first is where it was sent); any other queue took it from the last
    source = F.expr("CASE WHEN array_position(_movers, queue) = 0 THEN element_at(_movers, -1) "
                    "WHEN array_position(_movers, queue) > 1 "
                    "THEN element_at(_movers, CAST(array_position(_movers, queue) - 1 AS INT)) END")
    guessed = (df.where(unknown).join(moves, "message_id", "left")
               .withColumn("dlq_source", source).drop("_movers"))
    return df.where(~unknown | F.col("record_type").isNull()).unionByName(guessed)


def deliveries(df: DataFrame) -> DataFrame:
    """queue, sent, received_messages, receives, redeliveries, max_receive_count, deleted,
    dlq_moves, dlq_arrivals (messages that arrived in this queue as dead letters)."""
    df = with_dlq_source(good(df))
    per_type = df.groupBy("queue").agg(
        F.count(F.when(is_type("MESSAGE"), 1)).alias("sent"),
        F.count(F.when(is_type("DELETE"), 1)).alias("deleted"),
        F.count(F.when(is_type("DLQ_MOVE"), 1)).alias("dlq_moves"),
        F.count(F.when(is_type("MESSAGE") & F.col("dlq_source").isNotNull(), 1)).alias("dlq_arrivals"))
    recv = receives(df).groupBy("queue").agg(
        F.count(F.lit(1)).alias("receives"),
        F.count(F.when(F.col("receive_count") > 1, 1)).alias("redeliveries"),
        F.countDistinct("partition", "origin", "target_seq").alias("received_messages"),
        F.max("receive_count").alias("max_receive_count"))
    out = per_type.join(recv, "queue", "left").fillna(0)
    return out.select("queue", "sent", "received_messages", "receives", "redeliveries", "max_receive_count",
                      "deleted", "dlq_moves", "dlq_arrivals").orderBy("queue")


def receive_count_histogram(df: DataFrame) -> DataFrame:
    """queue, outcome (DELETE / DLQ_MOVE), receive_count, messages: how many receives a message took."""
    return (good(df).where(is_type("DELETE") | is_type("DLQ_MOVE"))
            .groupBy("queue", F.col("record_type").alias("outcome"), "receive_count")
            .agg(F.count(F.lit(1)).alias("messages")).orderBy("queue", "outcome", "receive_count"))


def dlq_moves(df: DataFrame) -> DataFrame:
    """Dead-letter moves: source queue, message id, receive count, time; and where it arrived."""
    d = with_dlq_source(good(df))
    moves = d.where(is_type("DLQ_MOVE")).select(
        F.col("queue").alias("source_queue"), "message_id", "receive_count", F.col("time").alias("moved"))
    arrivals = d.where(is_type("MESSAGE") & F.col("dlq_source").isNotNull()).select(
        F.col("dlq_source").alias("source_queue"), "message_id", F.col("queue").alias("dlq"))
    return moves.join(arrivals, ["source_queue", "message_id"], "left").orderBy("moved", "message_id")
