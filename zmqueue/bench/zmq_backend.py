"""zmqueue as a benchmark backend: one client per producer/consumer process."""

from __future__ import annotations

import uuid
from queue import Empty, SimpleQueue
from typing import Any

import zmqueue
from zmqueue.bench.backend import Target
from zmqueue.bench.config import FIFO_ID_BYTES, BenchConfig
from zmqueue.bench.worker import RECEIVE_WAIT_S
from zmqueue.config import MAX_MESSAGE_BYTES_LIMIT

SPEC = "zmqueue.bench.zmq_backend:ZmqueueBackend"
DEFAULT_MAX_MESSAGE_BYTES = 262144
"""``create_queue``'s default ``max_message_bytes``: bench queues keep it
unless their messages need more (``--size`` goes up to 1 MiB)."""


class ZmqueueProducer:
    def __init__(self, target: Target, cfg: BenchConfig, index: int) -> None:
        self.client = zmqueue.connect(target["consul"])
        self.queue = self.client.get_queue(target["queue"])
        self.fifo = cfg.queue_type == "fifo"
        self.group = f"g{index}"
        self.pipe = (self.queue.pipeline(cfg.window, max_requests=cfg.max_requests)
                     if cfg.window > 1 else None)

    def send(self, bodies: list[bytes]) -> None:
        if self.pipe is not None:  # up to `window` in flight, in up to `max_requests` requests
            if self.fifo:
                for b in bodies:
                    self.pipe.send(b, group_id=self.group, dedup_id=uuid.uuid4().hex)
            else:
                for b in bodies:
                    self.pipe.send(b)
            self.pipe.confirm_all()
        elif self.fifo:
            items: list[Any] = [zmqueue.OutgoingMessage(b, group_id=self.group, dedup_id=uuid.uuid4().hex)
                                for b in bodies]
            self.queue.send_batch(items)
        elif len(bodies) == 1:
            self.queue.send(bodies[0])
        else:
            self.queue.send_batch(bodies)

    def close(self) -> None:
        self.client.close()


class ZmqueueConsumer:
    """A receive pipeline (``Queue.receive_pipeline``): ``receives_in_flight``
    RECEIVE requests in flight, so the host takes the next batch while this
    one is checked; each batch's deletes ride on the next request, confirmed
    with its answer (RabbitMQ's and NATS's acks are not confirmed at all).
    ``close`` sends what is left."""

    def __init__(self, target: Target, cfg: BenchConfig, index: int) -> None:
        del index
        self.client = zmqueue.connect(target["consul"])
        self.queue = self.client.get_queue(target["queue"])
        self.pipe = self.queue.receive_pipeline(cfg.per_receive, RECEIVE_WAIT_S,
                                                in_flight=cfg.receives_in_flight)

    def receive(self, max_n: int, wait_s: float) -> list[tuple[bytes, Any]]:
        del max_n, wait_s  # the pipeline's (the worker passes per_receive and its wait)
        msgs = self.pipe.receive()
        self.pipe.raise_failed()
        return [(m.body, m) for m in msgs]  # the Message is the ack token: deleted by reference

    def ack(self, tokens: list[Any]) -> None:
        self.pipe.delete(tokens)

    def close(self) -> None:
        self.pipe.close()
        self.pipe.raise_failed()
        self.client.close()


class ZmqueuePushConsumer:
    """A push subscription (prefetch = the messages per receive, ``auto_delete``: each
    batch's deletes ride on the credits it returns); the handler puts every
    message in a local queue that ``receive`` takes from."""

    def __init__(self, target: Target, cfg: BenchConfig, index: int) -> None:
        del index
        self.client = zmqueue.connect(target["consul"])
        self.queue = self.client.get_queue(target["queue"])
        self.inbox: SimpleQueue[zmqueue.Message] = SimpleQueue()
        self.sub = self.queue.subscribe(self.inbox.put, prefetch=min(1000, cfg.per_receive))

    def receive(self, max_n: int, wait_s: float) -> list[tuple[bytes, Any]]:
        try:
            got = [self.inbox.get(timeout=wait_s)]
        except Empty:
            return []
        while len(got) < max_n:
            try:
                got.append(self.inbox.get_nowait())
            except Empty:
                break
        return [(m.body, None) for m in got]

    def ack(self, tokens: list[Any]) -> None:
        """Nothing to do: deleted when the handler returned (``auto_delete``)."""

    def close(self) -> None:
        self.sub.close()
        self.client.close()


class ZmqueueBackend:
    name = "zmqueue"
    notes = ("send confirmed after the host wrote it to its segment log; fsync per the queue's "
             "policy (interval: group commit, then fsync within the interval)")

    def __init__(self, consul: str) -> None:
        self.consul = consul

    def setup(self, cfg: BenchConfig) -> Target:
        name = f"bench-{uuid.uuid4().hex[:8]}" + (".fifo" if cfg.queue_type == "fifo" else "")
        needed = min(MAX_MESSAGE_BYTES_LIMIT, cfg.message_bytes + FIFO_ID_BYTES)
        with zmqueue.connect(self.consul) as c:
            c.create_queue(name, fifo=cfg.queue_type == "fifo", visibility_timeout=300,
                           replication_factor=cfg.replication_factor,
                           sync_replication=cfg.sync_replication, fsync=cfg.fsync,
                           sync_quorum=cfg.sync_quorum,
                           max_message_bytes=max(DEFAULT_MAX_MESSAGE_BYTES, needed))
        return {"consul": self.consul, "queue": name}

    def teardown(self, target: Target) -> None:
        with zmqueue.connect(self.consul) as c:
            c.delete_queue(target["queue"])

    @staticmethod
    def producer(target: Target, cfg: BenchConfig, index: int) -> ZmqueueProducer:
        return ZmqueueProducer(target, cfg, index)

    @staticmethod
    def consumer(target: Target, cfg: BenchConfig, index: int
                 ) -> ZmqueueConsumer | ZmqueuePushConsumer:
        if cfg.consumer_mode == "push":
            return ZmqueuePushConsumer(target, cfg, index)
        return ZmqueueConsumer(target, cfg, index)
