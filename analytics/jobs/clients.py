"""Top producers and consumers by client identity.

Producers come from the ``cid`` key of the MESSAGE blob; a message without it
counts as ``anonymous``. Receive and delete records carry no identity in
format version 1, so every consumer is ``anonymous`` until the host logs one.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.jobs.common import good, is_type, receives

ANONYMOUS = "anonymous"


def top_clients(df: DataFrame, limit: int = 20) -> DataFrame:
    """role (producer/consumer), client, queue, messages, bytes — the top ``limit`` per role."""
    df = good(df)
    ident = F.coalesce(F.col("client_id"), F.lit(ANONYMOUS)).alias("client")
    prod = (df.where(is_type("MESSAGE")).groupBy(ident, "queue")
            .agg(F.count(F.lit(1)).alias("messages"), F.sum("payload_size").cast("long").alias("bytes"))
            .withColumn("role", F.lit("producer")))
    cons = (receives(df).groupBy(F.lit(ANONYMOUS).alias("client"), "queue")
            .agg(F.count(F.lit(1)).alias("messages"), F.lit(None).cast("long").alias("bytes"))
            .withColumn("role", F.lit("consumer")))
    both = prod.unionByName(cons)
    return _top(both, limit)


def _top(df: DataFrame, limit: int) -> DataFrame:
    from pyspark.sql.window import Window

    w = Window.partitionBy("role").orderBy(F.col("messages").desc(), "client", "queue")
    return (df.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= limit)
            .select("role", "rank", "client", "queue", "messages", "bytes").orderBy("role", "rank"))
