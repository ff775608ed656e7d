"""A replica's position report after a commit is one-way: the writer records
it and sends nothing back; the periodic report (no ``ack`` field) is answered.
The periodic reports of many streams travel in one POSITIONS request, and a
writer's heartbeats name only the streams a replica has not reported caught
up with, in one frame per host."""

from __future__ import annotations

import json
import time
from typing import Any

import zmq

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue import protocol
from zmqueue.dataplane.replication import HEARTBEAT_TOPIC
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
        # (the queue's one replica is h1 itself: a report from a host that is no
        # replica of the partition is refused, with an error reply)
        report = {"s": stream, "node": h.node, "e": 0, "seq": 1}
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


class Peer:
    """A DEALER on a host's peer ROUTER and a SUB on its PUB (heartbeats)."""

    def __init__(self, host_json: dict[str, Any]) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(host_json["peer_endpoint"])
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, HEARTBEAT_TOPIC)
        self.sub.connect(host_json["pub_endpoint"])
        self.rid = 100

    def call(self, command: Command, body: Any) -> protocol.Frame:
        self.rid += 1
        self.sock.send(protocol.encode_request(command, self.rid, body))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.sock.poll(200):
                frame = protocol.decode(self.sock.recv())
                if frame.request_id == self.rid:
                    return frame
        raise AssertionError(f"no reply to {command.name} within 10 s")

    def beats_for(self, sid: str, window_s: float) -> list[list[Any]]:
        """Heartbeat entries naming ``sid`` that arrive within ``window_s``."""
        found: list[list[Any]] = []
        deadline = time.monotonic() + window_s
        while time.monotonic() < deadline and not found:
            if self.sub.poll(50):
                topic, raw = self.sub.recv_multipart()
                frame = protocol.decode(raw)
                assert topic == HEARTBEAT_TOPIC and frame.command == Command.HEARTBEAT
                found = [b for b in frame.body["h"] if b[0] == sid]
        return found

    def close(self) -> None:
        self.sock.close(linger=0)
        self.sub.close(linger=0)
        self.ctx.term()


def test_positions_are_reported_in_batches_and_heartbeats_name_streams_behind(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h1, h2 = hosts.start("h1"), hosts.start("h2")
    # a host writes host.json before it registers: once passing, the file is there
    wait_for(lambda: all(all_passing(check_statuses(consul_agent, h.node)) for h in (h1, h2)), 60,
             "hosts passing")
    peers = {h.node: Peer(json.loads((h.data_dir / "host.json").read_text())) for h in (h1, h2)}
    try:
        with zmqueue.connect(consul_agent.http_addr, request_timeout=10) as client:
            client.create_queue("hb", replication_factor=2, sync_replication=False).send(b"x")

        def stream_with_the_message() -> tuple[str, str, list[Any]] | None:
            # the client sends to one replica's own stream (its home, chosen at random)
            for writer, other in ((h1.node, h2.node), (h2.node, h1.node)):
                # (epoch 0 is not the writer's: read its position, record nothing)
                ask = {"node": other, "b": [[f"hb/0/{writer}", 0, 0]]}
                reply = peers[writer].call(Command.POSITIONS, ask)
                assert not reply.is_error, reply
                if reply.body["b"][0] and reply.body["b"][0][2] >= 1:
                    return writer, other, reply.body["b"][0]
            return None

        writer, replica, (epoch, _, last) = wait_for(stream_with_the_message, 15, "the message")
        peer, sid = peers[writer], f"hb/0/{writer}"
        # one item per asked stream, in order; None for a stream the host does not have
        reply = peer.call(Command.POSITIONS, {"node": replica, "b": [["nope/0/x", 0, 0], [sid, 0, 0]]})
        assert reply.body["b"][0] is None and reply.body["b"][1][0] == epoch
        # a host that is no replica of the partition is told so, per stream, and not counted
        reply = peer.call(Command.POSITIONS, {"node": "probe", "b": [[sid, epoch, last]]})
        assert "not a replica" in reply.body["b"][0]["refused"]
        bad = peer.call(Command.POSITIONS, {"node": replica, "b": [[sid, 0]]})
        assert bad.is_error and bad.body["code"] == 5 and "[stream, epoch, seq]" in bad.body["message"]
        # the replica is live and has everything: the writer's heartbeats (every
        # 200 ms) leave the stream out once it reported so (beats already sent
        # may still name it)
        wait_for(lambda: peer.beats_for(sid, 1.0) == [], 15, "heartbeats without the caught-up stream")
        # a request with one malformed item is refused whole: the item before
        # it (the stream reported behind) is not recorded, so no heartbeat names it
        bad = peer.call(Command.POSITIONS, {"node": replica, "b": [[sid, epoch, 0], ["no-slashes", 0, 0]]})
        assert bad.is_error and bad.body["code"] == 5 and "stream id" in bad.body["message"]
        assert peer.beats_for(sid, 0.6) == []

        def beats_while_reported_behind() -> list[list[Any]]:
            # the replica reports its real position every second: report it
            # behind between two heartbeats, again and again, until one names it
            peer.call(Command.POSITIONS, {"node": replica, "b": [[sid, epoch, 0]]})
            return peer.beats_for(sid, 0.25)

        beats = wait_for(beats_while_reported_behind, 15, "a heartbeat naming a stream behind")
        assert beats[0][1:] == [epoch, last], beats
    finally:
        for p in peers.values():
            p.close()
