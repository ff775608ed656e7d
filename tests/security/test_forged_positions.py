"""A forged position report acknowledges nothing (CURVE-secured hosts, a real
Consul).

Found by QA in the forty-sixth session: with both replicas of an R=3
synchronous queue frozen, one ``POSITION {"node": <h2>, "e": <epoch>,
"seq": 2**62, "ack": false}`` sent to the writer's peer port with h3's host
key made the writer acknowledge at once a send that no replica held. The
writer now takes a report only under the reporting host's own name (its
key's ZAP User-Id) and ignores a seq past its own log."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from tests.conftest import started, wait_for
from tests.security.harness import SecureCluster, host_info
from zmqueue import protocol
from zmqueue.errors import ErrorCode
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import Command
from zmqueue.security import curve


class Dealer:
    """A raw CURVE DEALER: requests are sent without waiting for their replies."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, server: bytes,
                 secret_file: Path) -> None:
        public, secret = curve.load_secret(secret_file)
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.CURVE_SERVERKEY, server)
        self.sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        self.sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        self.sock.connect(endpoint)
        self.rid = uuid.uuid4().int >> 72

    def send(self, command: Command, body: Any) -> int:
        self.rid += 1
        self.sock.send(protocol.encode_request(command, self.rid, body))
        return self.rid

    def replies(self, wait_ms: int) -> list[protocol.Frame]:
        out: list[protocol.Frame] = []
        while self.sock.poll(wait_ms):
            out.append(protocol.decode(self.sock.recv(), protocol.PEER_MAX_FRAME_BYTES))
            wait_ms = 0
        return out

    def call(self, command: Command, body: Any, timeout_s: float = 10) -> protocol.Frame:
        rid = self.send(command, body)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for frame in self.replies(100):
                if frame.request_id == rid:
                    return frame
        raise AssertionError(f"no reply to {command.name} within {timeout_s} s")


@pytest.fixture
def three(private_agent: ConsulAgent, tmp_path: Path) -> Iterator[SecureCluster]:
    with started(SecureCluster(private_agent, tmp_path, n_hosts=3, clients=("admin",))) as sc:
        yield sc


def test_a_forged_position_report_acknowledges_nothing(three: SecureCluster) -> None:
    h1, h2, h3 = three.hosts
    name = f"forged-{uuid.uuid4().hex[:8]}"
    three.clients["admin"].create_queue(name, replication_factor=3, partitions=1)  # synchronous
    info = host_info(h1)
    server = curve.load_public(three.keys / f"{h1.node}.key")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    client = Dealer(ctx, info["client_endpoint"], server, three.keys / "admin.key_secret")
    peer = Dealer(ctx, info["peer_endpoint"], server, three.keys / f"{h3.node}.key_secret")  # h3's key
    sid = f"{name}/0/{h1.node}"
    try:
        # a first send straight to h1: it writes its own stream, and both replicas hold it
        wait_for(lambda: not client.call(Command.SEND, {"q": name, "b": [b"first"]}).is_error, 30,
                 "h1 acknowledging a send to its own stream")
        epoch = peer.call(Command.CATCH_UP, {"s": sid, "from": 10**9, "prev": [0, 0], "max": 1}).body["e"]
        h2.freeze()
        h3.freeze()
        try:
            time.sleep(0.5)
            rid = client.send(Command.SEND, {"q": name, "b": [b"held by h1 alone"]})
            forged = [{"s": sid, "node": h2.node, "e": epoch, "seq": 2**62, "ack": False},  # not h3's name
                      {"s": sid, "node": h3.node, "e": epoch, "seq": 2**62, "ack": False}]  # past h1's log
            answer: protocol.Frame | None = None
            refusals: list[protocol.Frame] = []
            deadline = time.monotonic() + 9
            while answer is None and time.monotonic() < deadline:
                for report in forged:
                    peer.send(Command.POSITION, report)
                refusals += peer.replies(0)
                answer = next((f for f in client.replies(200) if f.request_id == rid), None)
            refusals += peer.replies(500)
        finally:
            h2.thaw()
            h3.thaw()
        assert answer is not None, "no answer to the send within 9 s"
        assert answer.is_error, "a send no replica holds was acknowledged on forged position reports"
        assert answer.body["code"] == ErrorCode.UNAVAILABLE, answer.body
        # the report under h2's name was refused with an answer; the one past h1's log was ignored
        codes = {f.body["code"] for f in refusals if f.is_error}
        assert codes == {ErrorCode.ACCESS_DENIED}, [f.body for f in refusals]
        assert any(h2.node in f.body["message"] and h3.node in f.body["message"] for f in refusals)
        # a request for another host's name is refused, and a malformed one is an INVALID_PARAMETER
        denied = peer.call(Command.POSITIONS, {"node": h2.node, "b": [[sid, epoch, 1]]})
        assert denied.is_error and denied.body["code"] == ErrorCode.ACCESS_DENIED
        bad = peer.call(Command.POSITION, {"s": sid, "node": h3.node, "e": "x", "seq": 1})
        assert bad.is_error and bad.body["code"] == ErrorCode.INVALID_PARAMETER
        assert bad.body["details"]["field"] == "e"
    finally:
        client.sock.close()
        peer.sock.close()
        ctx.term()
