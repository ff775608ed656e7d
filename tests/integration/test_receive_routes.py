"""A consumer whose routes went stale without an error still finds every host's messages."""

from __future__ import annotations

import zmqueue
from tests.conftest import QueueCluster, wait_for


def test_a_receive_re_reads_stale_routes_and_finds_messages_on_a_host_it_did_not_ask(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("stale")
    q = qcluster.client.create_queue(name, replication_factor=2, sync_replication=True)
    wait_for(lambda: len(q.refresh() or q.routes.part(0).writers) == 2, 20, "both streams written")
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        consumer = other.get_queue(name)
        consumer.receive(max_messages=1)  # reads the routes once
        route = consumer.routes.part(0)
        a, b = sorted(route.replicas)
        # stale: this consumer believes a also writes b's stream (as while a had
        # taken it over), so b, which writes it again, is not asked
        route.writers[b] = a
        assert [ep for _, ep in consumer._receive_targets()] == [route.endpoint(a)]
        producer = qcluster.client.get_queue(name)
        producer.routes.part(0).home = b  # sends go to b's own stream
        producer.send(b"on-b")

        got: list[bytes] = []

        def received() -> bool:
            got.extend(m.body for m in consumer.receive(max_messages=10, wait_time=0.5))
            return b"on-b" in got

        wait_for(received, 10, "the message on b received by the stale consumer")
        assert consumer.routes.part(0).writers[b] == b
