"""Spark jobs over the records DataFrame (``analytics.jobs.common.load_records``).

Each job is a function ``DataFrame -> DataFrame``; :data:`JOBS` names the
ones the CLI and the report run (name -> function, one-line description).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from analytics.jobs.clients import top_clients
from analytics.jobs.corruption import corrupt_blocks
from analytics.jobs.deliveries import deliveries, dlq_moves, receive_count_histogram
from analytics.jobs.depth import depth
from analytics.jobs.latency import latency
from analytics.jobs.replication import replication_lag
from analytics.jobs.throughput import throughput

Job = Callable[[DataFrame], DataFrame]

JOBS: dict[str, tuple[Job, str]] = {
    "throughput": (throughput, "messages sent, received, deleted, dead-lettered per queue per minute"),
    "latency": (latency, "end-to-end latency (send -> delete) percentiles per queue"),
    "deliveries": (deliveries, "receive counts, redeliveries and DLQ moves per queue"),
    "receive-counts": (receive_count_histogram, "how many receives messages took before delete / DLQ"),
    "dlq-moves": (dlq_moves, "every dead-letter move: source, message id, receive count, target"),
    "depth": (depth, "queue depth and age of the oldest message at each minute"),
    "clients": (top_clients, "top producers and consumers by client identity"),
    "replication": (replication_lag, "replication lag between the replicas of each partition"),
    "corruption": (corrupt_blocks, "corrupt or truncated blocks, with the reason"),
}

__all__ = ["JOBS", "Job"]
