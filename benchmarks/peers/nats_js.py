"""NATS JetStream through nats-py: a file-storage stream (R=1, or R=3 on the
3-node cluster), publishes awaited for their acks (a batch is published
concurrently and all its acks awaited), one durable pull consumer shared by
the consumer processes; acks are flushed (one round trip) before returning.
NATS 2.9 does not fsync before it acknowledges a publish.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from zmqueue.bench.backend import Target
from zmqueue.bench.config import BenchConfig

SETUP_TIMEOUT_S = 60.0


class _Loop:
    def __init__(self, urls: list[str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.run(nats.connect(servers=urls, connect_timeout=10))
        self.js = self.nc.jetstream(timeout=30)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.close()


class NatsProducer(_Loop):
    def __init__(self, target: Target) -> None:
        super().__init__(target["urls"])
        self.subject = target["subject"]

    def send(self, bodies: list[bytes]) -> None:
        async def go() -> None:
            await asyncio.gather(*(self.js.publish(self.subject, b) for b in bodies))

        self.run(go())


class NatsConsumer(_Loop):
    def __init__(self, target: Target) -> None:
        super().__init__(target["urls"])
        self.sub = self.run(self.js.pull_subscribe(target["subject"], durable="bench",
                                                   stream=target["stream"]))

    def receive(self, max_n: int, wait_s: float) -> list[tuple[bytes, Any]]:
        async def go() -> list[Any]:
            try:
                return list(await self.sub.fetch(max_n, timeout=wait_s))
            except (TimeoutError, nats.errors.TimeoutError):
                return []

        return [(m.data, m) for m in self.run(go())]

    def ack(self, tokens: list[Any]) -> None:
        async def go() -> None:
            for m in tokens:
                await m.ack()
            await self.nc.flush()

        self.run(go())


class NatsBackend:
    name = "nats"
    notes = "JetStream file storage, publish acks (no fsync before the ack in 2.9), pull consumer"

    def __init__(self, urls: list[str], replicas: int = 1) -> None:
        self.urls = urls
        self.replicas = replicas
        if replicas > 1:
            self.name = f"nats-r{replicas}"

    def _admin(self, fn: Any) -> Any:
        loop = _Loop(self.urls)
        try:
            return loop.run(fn(loop.js))
        finally:
            loop.close()

    def setup(self, cfg: BenchConfig) -> Target:
        tag = uuid.uuid4().hex[:8]
        stream, subject = f"BENCH{tag}", f"bench.{tag}"

        async def create(js: Any) -> None:
            deadline = asyncio.get_running_loop().time() + SETUP_TIMEOUT_S
            while True:  # a fresh cluster needs a moment to elect its meta leader
                try:
                    await js.add_stream(StreamConfig(name=stream, subjects=[subject],
                                                     storage=StorageType.FILE, num_replicas=self.replicas))
                    await js.add_consumer(stream, ConsumerConfig(durable_name="bench",
                                                                 ack_policy=AckPolicy.EXPLICIT,
                                                                 max_ack_pending=100_000, ack_wait=300))
                    return
                except Exception:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.5)

        self._admin(create)
        return {"urls": self.urls, "stream": stream, "subject": subject}

    def teardown(self, target: Target) -> None:
        self._admin(lambda js: js.delete_stream(target["stream"]))

    @staticmethod
    def producer(target: Target, cfg: BenchConfig, index: int) -> NatsProducer:
        return NatsProducer(target)

    @staticmethod
    def consumer(target: Target, cfg: BenchConfig, index: int) -> NatsConsumer:
        return NatsConsumer(target)
