"""Options of one benchmark run, validated, with their defaults."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from zmqueue.config import MAX_MESSAGE_BYTES_LIMIT, SYNC_QUORUMS
from zmqueue.errors import ConfigError
from zmqueue.protocol import MAX_FRAME_BYTES

QUEUE_TYPES = ("standard", "fifo")
CONSUMER_MODES = ("pull", "push")
FSYNC_POLICIES = ("always", "interval", "never")
MAX_MESSAGES_LIMIT = 20_000_000
HEADER_BYTES = 20
"""Every body starts with producer (u32), sequence (u64), send time (i64 ns)."""
MIN_RECEIVE_BATCH = 10
FIFO_ID_BYTES = 1024
"""Room kept beside a FIFO body for its group and dedup ids, which count
against the queue's ``max_message_bytes`` (at most 1 MiB)."""
MESSAGE_OVERHEAD_BYTES = 1024
"""Room per message beside its body in a request or reply (ids, receipts):
a send or receive carries at most ``MAX_FRAME_BYTES`` (64 MiB)."""


@dataclass(frozen=True)
class BenchConfig:
    system: str = "zmqueue"
    """Which system is measured: "zmqueue" or a peer's name (benchmarks/peers)."""
    workload: str = "custom"
    """A label (W1-W5 presets set it) carried into the results."""
    message_bytes: int = 100
    producers: int = 1
    consumers: int = 1
    batch: int = 1
    """Messages per send request and the max per receive."""
    window: int = 1
    """Single-message sends in flight per producer (pipelined; needs batch=1):
    the producer is handed ``window`` messages at a time and returns once all
    are confirmed. zmqueue sends them through ``Queue.pipeline``, the peers
    through the same path as their W3 batches (concurrent publishes, a Redis
    pipeline)."""
    max_requests: int | None = None
    """zmqueue pipelines (``window`` > 1): SEND requests in flight per
    producer; sends made meanwhile are coalesced into the next request
    (``Queue.pipeline(max_requests=...)``; None: the pipeline's default, one
    per partition of the queue, and 1 for FIFO queues; ``max_requests`` >=
    ``window``: one request per message)."""
    queue_type: str = "standard"
    replication_factor: int = 1
    sync_replication: bool = True
    sync_quorum: str = "majority"
    """zmqueue: which replicas a synchronous write waits for (``QueueConfig.sync_quorum``)."""
    fsync: str = "interval"
    duration_s: float = 10.0
    """How long producers send; consumers then drain what was confirmed."""
    max_messages: int = 2_000_000
    """Producers stop early after this many messages in total (a bound on memory)."""
    rate_per_s: float = 0.0
    """Total send rate to pace producers at; 0 = as fast as confirms allow."""
    drain_timeout_s: float = 60.0
    warmup_s: float = 0.0
    """Send latencies of the first warmup_s seconds are not counted."""
    consumer_mode: str = "pull"
    """``pull``: receive (long polls) and delete; ``push``: a subscription
    (zmqueue only) whose deletes ride on its credits."""
    receives_in_flight: int = 2
    """zmqueue pull consumers: RECEIVE requests in flight
    (``Queue.receive_pipeline(in_flight=...)``; 1: one round trip per batch)."""

    def validate(self) -> BenchConfig:
        def bad(field: str, why: str) -> ConfigError:
            return ConfigError(f"bench option {field}={getattr(self, field)!r}: {why}", field=field, why=why)

        if not HEADER_BYTES <= self.message_bytes <= MAX_MESSAGE_BYTES_LIMIT:
            raise bad("message_bytes", f"must be {HEADER_BYTES} to 1 MiB (bodies carry a header)")
        for f, hi in (("producers", 64), ("consumers", 64), ("batch", 1000), ("window", 1000)):
            if not 1 <= getattr(self, f) <= hi:
                raise bad(f, f"must be 1 to {hi}")
        if self.queue_type not in QUEUE_TYPES:
            raise bad("queue_type", f"must be one of {QUEUE_TYPES}")
        if self.queue_type == "fifo" and self.message_bytes > MAX_MESSAGE_BYTES_LIMIT - FIFO_ID_BYTES:
            raise bad("message_bytes", f"a FIFO message's group and dedup ids count against the queue's "
                                       f"1 MiB limit: at most {MAX_MESSAGE_BYTES_LIMIT - FIFO_ID_BYTES}")
        if self.window > 1 and self.batch > 1:
            raise bad("window", "pipelines single-message sends: use it with batch=1")
        if (self.message_bytes + MESSAGE_OVERHEAD_BYTES) * self.per_receive > MAX_FRAME_BYTES:
            raise bad("message_bytes", f"{self.per_receive} messages of it in one send or receive (batch x "
                                       f"window, at least {MIN_RECEIVE_BATCH}) pass the "
                                       f"{MAX_FRAME_BYTES >> 20} MiB one zmqueue request or reply "
                                       "carries: a smaller size, batch or window")
        if self.max_requests is not None and not 1 <= self.max_requests <= 1000:
            raise bad("max_requests", "must be 1 to 1000")
        if self.queue_type == "fifo" and self.max_requests not in (None, 1):
            raise bad("max_requests", "a FIFO queue's pipeline keeps one request in flight (1)")
        if not 1 <= self.replication_factor <= 5:
            raise bad("replication_factor", "must be 1 to 5")
        if self.fsync not in FSYNC_POLICIES:
            raise bad("fsync", f"must be one of {FSYNC_POLICIES}")
        if self.sync_quorum not in SYNC_QUORUMS:
            raise bad("sync_quorum", f"must be one of {SYNC_QUORUMS}")
        if not 0.1 <= self.duration_s <= 3600:
            raise bad("duration_s", "must be 0.1 to 3600 seconds")
        if not 1 <= self.max_messages <= MAX_MESSAGES_LIMIT:
            raise bad("max_messages", f"must be 1 to {MAX_MESSAGES_LIMIT}")
        if not 0 <= self.rate_per_s < math.inf:  # (nan and inf paced nothing: flat out)
            raise bad("rate_per_s", "must be a finite number >= 0 (0: flat out)")
        if not 1 <= self.drain_timeout_s <= 3600:
            raise bad("drain_timeout_s", "must be 1 to 3600 seconds")
        if not 0 <= self.warmup_s < self.duration_s:
            raise bad("warmup_s", "must be 0 or more and below the duration (--duration)")
        if not 1 <= self.receives_in_flight <= 8:
            raise bad("receives_in_flight", "must be 1 to 8")
        if self.consumer_mode not in CONSUMER_MODES:
            raise bad("consumer_mode", f"must be one of {CONSUMER_MODES}")
        if self.consumer_mode == "push" and self.system != "zmqueue":
            raise bad("consumer_mode", "push consumers are measured for zmqueue only")
        return self

    @property
    def per_receive(self) -> int:
        """Messages a consumer takes per receive: max(batch x window, 10), for
        every system alike (RabbitMQ's prefetch, a NATS fetch, XREADGROUP
        COUNT, zmqueue receive)."""
        return max(self.batch * self.window, MIN_RECEIVE_BATCH)

    def with_(self, **changes: Any) -> BenchConfig:
        return replace(self, **changes).validate()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


WORKLOADS: dict[str, dict[str, Any]] = {
    "W1": {"producers": 1, "consumers": 1, "batch": 1},
    "W2": {"producers": 1, "consumers": 1, "batch": 1},
    "W3": {"producers": 1, "consumers": 1, "batch": 100},
    "W4": {"producers": 4, "consumers": 4, "batch": 1},
    "W5": {"producers": 1, "consumers": 1, "batch": 1, "replication_factor": 3,
           "sync_replication": True},
    "W5b": {"producers": 1, "consumers": 1, "batch": 100, "replication_factor": 3,
            "sync_replication": True},
    "W1p": {"producers": 1, "consumers": 1, "batch": 1, "window": 100},
    "W5p": {"producers": 1, "consumers": 1, "batch": 1, "window": 100, "replication_factor": 3,
            "sync_replication": True},
}
"""Workload presets of the benchmark issue. W1 and W2 are the same traffic
(one send at a time, confirmed, then received and deleted); W1 reports its
end-to-end throughput, W2 its latency percentiles. W5 is W1 with R=3 sync,
W5b is W3 with R=3 sync. W1p and W5p are W1 and W5 with 100 single-message
sends in flight (pipelined: the issue allows windowed sends in W1)."""


def preset(name: str, **overrides: Any) -> BenchConfig:
    if name not in WORKLOADS:
        raise ConfigError(f"unknown workload {name!r}; one of {sorted(WORKLOADS)}", field="workload")
    return BenchConfig(workload=name, **{**WORKLOADS[name], **overrides}).validate()
