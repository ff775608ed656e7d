"""Redis Streams through redis-py with hiredis: XADD (a batch in one
pipeline), XREADGROUP with a consumer group, XACK + XDEL (one pipeline).
AOF with ``appendfsync everysec``: a confirmed XADD may be lost if the server
dies within about a second, a weaker promise than an fsync per confirm.
"""

from __future__ import annotations

import uuid
from typing import Any

import redis

from zmqueue.bench.backend import Target
from zmqueue.bench.config import BenchConfig


class RedisProducer:
    def __init__(self, target: Target) -> None:
        self.r = redis.Redis(port=target["port"])
        self.stream = target["stream"]

    def send(self, bodies: list[bytes]) -> None:
        if len(bodies) == 1:
            self.r.xadd(self.stream, {"d": bodies[0]})
            return
        pipe = self.r.pipeline(transaction=False)
        for b in bodies:
            pipe.xadd(self.stream, {"d": b})
        pipe.execute()

    def close(self) -> None:
        self.r.close()


class RedisConsumer:
    def __init__(self, target: Target, index: int) -> None:
        self.r = redis.Redis(port=target["port"])
        self.stream = target["stream"]
        self.name = f"c{index}"

    def receive(self, max_n: int, wait_s: float) -> list[tuple[bytes, Any]]:
        got: Any = self.r.xreadgroup("bench", self.name, {self.stream: ">"}, count=max_n,
                                block=max(1, int(wait_s * 1000)))
        if not got:
            return []
        return [(fields[b"d"], mid) for mid, fields in got[0][1]]

    def ack(self, tokens: list[Any]) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.xack(self.stream, "bench", *tokens)
        pipe.xdel(self.stream, *tokens)
        pipe.execute()

    def close(self) -> None:
        self.r.close()


class RedisBackend:
    name = "redis"
    notes = "Streams + consumer group, AOF appendfsync everysec (weaker: up to ~1 s of confirmed writes)"

    def __init__(self, port: int) -> None:
        self.port = port

    def setup(self, cfg: BenchConfig) -> Target:
        stream = f"bench-{uuid.uuid4().hex[:8]}"
        r = redis.Redis(port=self.port)
        r.xgroup_create(stream, "bench", id="$", mkstream=True)
        r.close()
        return {"port": self.port, "stream": stream}

    def teardown(self, target: Target) -> None:
        r = redis.Redis(port=self.port)
        r.delete(target["stream"])
        r.close()

    @staticmethod
    def producer(target: Target, cfg: BenchConfig, index: int) -> RedisProducer:
        return RedisProducer(target)

    @staticmethod
    def consumer(target: Target, cfg: BenchConfig, index: int) -> RedisConsumer:
        return RedisConsumer(target, index)
