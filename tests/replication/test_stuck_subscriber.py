"""A subscriber that stops reading a host's replication PUB socket (a frozen
replica host, a stuck process, a stray SUB on the port) is disconnected by
ZMTP heartbeats. (The host kept its connection for good and queued every
frame published meanwhile for it: hundreds of MB of a host's memory per few
hundred MB of replicated sends.) Real hosts; the host's side of the
connection is read from /proc."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import zmq

from tests.conftest import QueueCluster
from tests.helpers import service_entry


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # (closed meanwhile)
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def _inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the IPv4 TCP connection from ``local_port`` to ``remote_port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == local_port and int(f[2].split(":")[1], 16) == remote_port:
            return int(f[9])
    return None


def test_a_subscriber_that_stops_reading_is_dropped_by_the_host(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("stuck-sub"), replication_factor=2)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    mon = sub.get_monitor_socket(zmq.EVENT_CONNECTED)
    try:
        sub.setsockopt(zmq.RCVHWM, 1)
        sub.setsockopt(zmq.RCVBUF, 4096)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        watched: list[tuple[int, int, int]] = []  # (host pid, host's port, our port)
        for h in qcluster.factory.hosts:
            entry = service_entry(qcluster.factory.agent, h.node)
            assert entry is not None
            pub = entry["Service"]["Meta"]["pub_endpoint"]
            sub.connect(pub)
            assert mon.poll(10_000), f"no connection to {pub}"
            ev = zmq.utils.monitor.recv_monitor_message(mon)
            s = socket.socket(fileno=os.dup(ev["value"]))
            try:
                ours = s.getsockname()[1]
            finally:
                s.close()
            watched.append((h.pid, int(pub.rsplit(":", 1)[1]), ours))
        body = os.urandom(1024)
        deadline = time.monotonic() + 45  # (heartbeat timeout 5 s; dropped after ~6-8 s)
        dropped: list[tuple[int, int, int]] = []
        while not dropped:
            assert time.monotonic() < deadline, "no host dropped the subscriber that stopped reading"
            q.send_batch([body] * 100)  # (never read by the SUB: its pipe and buffer fill)
            for pid, port, ours in watched:
                inode = _inode(port, ours)
                if inode is None or inode not in _socket_inodes(pid):
                    dropped.append((pid, port, ours))
        # the host that dropped it still serves and replicates
        assert q.send(b"after") and len(q.receive(max_messages=10, wait_time=2)) >= 1
    finally:
        sub.disable_monitor()
        mon.close(linger=0)
        sub.close(linger=0)
        ctx.term()
