"""A replica's position report after a commit is one-way: the writer records
it and sends nothing back; the periodic report (no ``ack`` field) is answered."""

from __future__ import annotations

import json
import time

import zmq

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue import protocol
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import Command


def test_a_one_way_position_report_gets_no_reply_and_a_periodic_one_does(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("h1")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "h1 passing")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
        client.create_queue("pos").send(b"x")
    peer = json.loads((h.data_dir / "host.json").read_text())["peer_endpoint"]
    stream = f"pos/0/{h.node}"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(peer)
        report = {"s": stream, "node": "a-replica", "e": 0, "seq": 1}
        # one connection keeps order: the host handles 11 before 12, so if 11
        # were answered its reply would arrive first
        sock.send(protocol.encode_request(Command.POSITION, 11, {**report, "ack": False}))
        sock.send(protocol.encode_request(Command.POSITION, 12, report))
        deadline = time.monotonic() + 10
        replies: list[protocol.Frame] = []
        while time.monotonic() < deadline and not replies:
            if sock.poll(200):
                replies.append(protocol.decode(sock.recv()))
        assert replies, "no reply to the periodic POSITION within 10 s"
        first = replies[0]
        assert first.request_id == 12 and not first.is_error, first
        assert first.body["last"] >= 1  # the writer's copy holds the message sent above
    finally:
        sock.close(linger=0)
        ctx.term()
