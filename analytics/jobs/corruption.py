"""Blocks the reader could not trust: one row per bad block, with the reason."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def corrupt_blocks(df: DataFrame) -> DataFrame:
    """host, queue, partition, origin, segment, block_offset, reason."""
    return (df.where(F.col("corrupt").isNotNull())
            .select("host", "queue", "partition", "origin", "segment", "block_offset",
                    F.col("corrupt").alias("reason"))
            .orderBy("host", "queue", "partition", "origin", "segment", "block_offset"))
