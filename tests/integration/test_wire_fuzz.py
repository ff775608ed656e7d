"""Fuzzing a live host's client socket and its host-to-host (peer) socket:
random frames (valid headers with random bodies, and raw garbage) never
crash the host or touch stored data.
(Generated values never name the test's queue, so a well-formed random
DELETE_QUEUE or PURGE cannot legitimately remove it.)"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue import protocol
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import Command


def frames_naming(*texts: str) -> st.SearchStrategy[bytes]:
    """Random frames whose values may be any of ``texts`` too (the peer socket's
    fuzz names the test queue's real stream, so CATCH_UP and POSITION(S)
    reach a stream's code, not only the id check)."""
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.binary(max_size=64),
                     st.text(max_size=20),
                     st.sampled_from(["other", "q", "p", "m", "r", "max", "wait_ms", *texts]))
    values = st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.sampled_from(["q", "p", "m", "b", "r", "max", "wait_ms", "vis_s", "dl", "sub",
                                         "n", "name", "config", "prefix", "prefetch",
                                         # host-to-host bodies (CATCH_UP, POSITION(S))
                                         "s", "e", "seq", "from", "prev", "node", "ack"]),
                        inner, max_size=6)),
        max_leaves=20)
    return st.one_of(
        st.tuples(st.sampled_from(list(Command)), st.integers(0, 2**64 - 1), values).map(
            lambda t: protocol.encode_request(t[0], t[1], t[2])),
        st.binary(max_size=200),
        st.tuples(st.binary(min_size=16, max_size=16), st.binary(max_size=100)).map(
            lambda t: b"ZQ\x01" + t[0][3:] + t[1]),
    )


@pytest.mark.parametrize("socket", ["client", "peer"])
def test_random_frames_never_crash_a_host_or_lose_stored_messages(
        hosts: HostFactory, consul_agent: ConsulAgent, socket: str) -> None:
    h = hosts.start("fuzz")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "host passing")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
        q = client.create_queue("fuzz", fsync="always")
        stored = set(q.send_batch([f"keep-{i}".encode() for i in range(10)]))
        endpoint = q.routes.for_send(0)[0]
        assert endpoint is not None
        target, frames = endpoint, frames_naming()
        if socket == "peer":  # where other hosts send CATCH_UP, POSITION(S), dead letters
            target = client.request(endpoint, Command.STATUS, None)["endpoints"]["peer_endpoint"]
            frames = frames_naming(f"fuzz/0/{h.node}", h.node, f"fuzz/\u00b2/{h.node}",
                                   f"fuzz/{'9' * 5000}/x")
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(target)
        answered = [0]

        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
        @given(frames)
        def fire(frame: bytes) -> None:
            sock.send(frame)
            while sock.poll(20):
                data = sock.recv()
                # every answer is a well-formed reply (an unknown command is echoed, so
                # check the header fields rather than decoding the command enum)
                magic, version, _cmd, flags, _rid = protocol.HEADER.unpack_from(data)
                assert (magic, version) == (protocol.MAGIC, protocol.VERSION)
                assert flags & protocol.Flags.REPLY
                if flags & protocol.Flags.ERROR:
                    err = zmqueue.errors.from_wire(msgpack.unpackb(data[protocol.HEADER_SIZE:]))
                    assert isinstance(err, zmqueue.ZmqueueError)
                answered[0] += 1

        try:
            if socket == "peer":  # stream ids whose partition str.isdigit() passed and int() refused:
                for stream in (f"fuzz/\u00b2/{h.node}", f"fuzz/{'9' * 5000}/{h.node}"):  # (a one-way
                    for ack in (False, True):  # POSITION raised ValueError out of the loop: a dead host)
                        sock.send(protocol.encode_request(Command.POSITION, 1, {"s": stream, "ack": ack}))
                    with pytest.raises(zmqueue.InvalidParameter, match="bad stream id"):
                        client.request(target, Command.CATCH_UP, {"s": stream, "from": 1})
            fire()
        finally:
            sock.close()
            ctx.term()
        assert h.alive(), h.log_tail()
        assert answered[0] > 50
        status: dict[str, Any] = client.request(endpoint, Command.STATUS, None)
        assert status["counters"]["malformed"] > 0
        assert status["counters"].get("internal_errors", 0) == 0, h.log_tail()
        got = {m.id for m in q.receive(max_messages=100, wait_time=1)}
        assert got == stored


def test_a_request_of_millions_of_tiny_values_gets_a_clear_error_on_both_sockets(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """(8 MB of one-byte empty arrays were decoded into 8 M Python lists with
    the GIL held: 600 MB and seconds of a stalled host, whose health checks
    then failed and whose streams failed over.)"""
    h = hosts.start("amp")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "host passing")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
        q = client.create_queue("amp")
        endpoint = q.routes.for_send(0)[0]
        assert endpoint is not None
        peer = client.request(endpoint, Command.STATUS, None)["endpoints"]["peer_endpoint"]
        n = 8 << 20
        frame = protocol.HEADER.pack(protocol.MAGIC, protocol.VERSION, int(Command.SEND), 0, 77) + \
            b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n
        ctx = zmq.Context()
        try:
            for target in (endpoint, peer):
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(target)
                try:
                    sock.send(frame)
                    assert sock.poll(30_000), f"no reply from {target}"
                    reply = protocol.decode(sock.recv())
                    assert reply.is_error and reply.request_id == 77
                    err = zmqueue.errors.from_wire(reply.body)
                    assert isinstance(err, zmqueue.ProtocolError), err
                    assert "more than 262144 values" in str(err) and "split the request" in str(err)
                finally:
                    sock.close()
        finally:
            ctx.term()
        assert q.send(b"still serving") and h.alive()
        assert all_passing(check_statuses(consul_agent, h.node))
