"""RabbitMQ quorum queue with publisher confirms, through pika.

A batch is published back to back and then every confirm is awaited
(pipelined within the batch; one message in flight for batch 1). RabbitMQ
fsyncs a quorum queue's log before it confirms. Consumers use basic.consume
with a prefetch of max(10, 2 x batch x window) and ack with ``multiple``;
AMQP acks are not confirmed by the server.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pika

from zmqueue.bench.backend import Target
from zmqueue.bench.config import BenchConfig

CONFIRM_TIMEOUT_S = 30.0


def _connect(port: int) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))


class RabbitProducer:
    def __init__(self, target: Target) -> None:
        self.conn = _connect(target["port"])
        self.channel = self.conn.channel()
        self.impl = self.channel._impl  # the async channel: lets a batch be pipelined
        self.queue = target["queue"]
        self.published = 0
        self.confirmed = 0
        self.nacked = 0
        ready: list[bool] = []
        self.impl.confirm_delivery(ack_nack_callback=self._on_confirm, callback=lambda _f: ready.append(True))
        while not ready:
            self.conn.process_data_events(time_limit=0.1)
        self.props = pika.BasicProperties(delivery_mode=2)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag = int(method.delivery_tag)
        n = (tag - self.confirmed) if method.multiple else 1
        if isinstance(method, pika.spec.Basic.Nack):
            self.nacked += n
        self.confirmed = tag if method.multiple else self.confirmed + 1

    def send(self, bodies: list[bytes]) -> None:
        for b in bodies:
            self.impl.basic_publish("", self.queue, b, self.props)
        self.published += len(bodies)
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while self.confirmed < self.published:
            if time.monotonic() > deadline:
                raise TimeoutError("publisher confirms did not arrive")
            self.conn.process_data_events(time_limit=0)
        if self.nacked:
            raise RuntimeError(f"{self.nacked} publishes were nacked")

    def close(self) -> None:
        self.conn.close()


class RabbitConsumer:
    def __init__(self, target: Target, cfg: BenchConfig) -> None:
        self.conn = _connect(target["port"])
        self.channel = self.conn.channel()
        self.channel.basic_qos(prefetch_count=max(10, 2 * cfg.batch * cfg.window))
        self.buf: list[tuple[bytes, Any]] = []
        self.channel.basic_consume(target["queue"], self._on_message, auto_ack=False)

    def _on_message(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.buf.append((body, method.delivery_tag))

    def receive(self, max_n: int, wait_s: float) -> list[tuple[bytes, Any]]:
        deadline = time.monotonic() + wait_s
        while not self.buf and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=min(0.05, wait_s))
        if len(self.buf) < max_n:
            self.conn.process_data_events(time_limit=0)
        got, self.buf = self.buf[:max_n], self.buf[max_n:]
        return got

    def ack(self, tokens: list[Any]) -> None:
        self.channel.basic_ack(delivery_tag=max(tokens), multiple=True)

    def close(self) -> None:
        self.conn.close()


class RabbitBackend:
    name = "rabbitmq"
    notes = "quorum queue, publisher confirms (fsync before confirm), consumer acks unconfirmed"

    def __init__(self, port: int) -> None:
        self.port = port

    def setup(self, cfg: BenchConfig) -> Target:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        conn = _connect(self.port)
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
        conn.close()
        return {"port": self.port, "queue": name}

    def teardown(self, target: Target) -> None:
        conn = _connect(self.port)
        conn.channel().queue_delete(target["queue"])
        conn.close()

    @staticmethod
    def producer(target: Target, cfg: BenchConfig, index: int) -> RabbitProducer:
        return RabbitProducer(target)

    @staticmethod
    def consumer(target: Target, cfg: BenchConfig, index: int) -> RabbitConsumer:
        return RabbitConsumer(target, cfg)
