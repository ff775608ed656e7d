"""A host whose disk runs low: its data directory on a small tmpfs.

Below the host's reserve (``--min-free-disk-mb``) sends get DISK_FULL with a
message that says what is free, what is kept and what to do; the host keeps
serving, every acknowledged message is received and deleted (receives and
deletes still have room to be logged), and sends work again once space is
freed. Mounting the tmpfs needs root (CI runs as root; elsewhere the test is
skipped, saying so)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses, service_entry, wait_check_removed
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import list_hosts
from zmqueue.errors import DiskFull
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import Command, sent_ids

TMPFS_MB = 24
RESERVE_MB = 8
FILLER_MB = 8
BODY = 60_000


@contextlib.contextmanager
def mounted(mount: Path) -> Iterator[Path]:
    """A TMPFS_MB tmpfs at ``mount`` (made), unmounted after."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path / "small-disk") as mount:
        yield mount


@pytest.fixture
def two_small_disks(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    with mounted(tmp_path / "disk1") as one, mounted(tmp_path / "disk2") as two:
        yield one, two


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_below_reserve(disk: Path) -> None:
    """Leave half a MiB less than the reserve free: the host refuses new
    messages, with room left for what it writes besides (replicated records)."""
    (disk / "filler").write_bytes(b"\0" * (free_bytes(disk) - (RESERVE_MB << 20) + (512 << 10)))


def test_below_the_reserve_sends_are_refused_consumers_drain_and_space_returns(
        small_disk: Path, hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (FILLER_MB << 20))
    h = hosts.start("h1", data_dir=small_disk / "data",
                    extra_args=["--min-free-disk-mb", str(RESERVE_MB)])
    try:
        wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "the host passing")
        with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
            q = client.create_queue("low-disk")
            sent: dict[str, bytes] = {}
            refused: DiskFull | None = None
            for _ in range(200):  # ~48 MB at most: twice the disk
                bodies = [os.urandom(BODY) for _ in range(4)]
                try:
                    ids = q.send_batch(bodies)
                except DiskFull as exc:
                    refused = exc
                    break
                sent.update(zip(ids, bodies, strict=True))
            assert refused is not None, "sends were never refused"
            text = str(refused)
            assert "MiB free" in text and f"{RESERVE_MB:.1f} MiB kept free" in text, text
            assert "--min-free-disk-mb" in text, text
            assert "consumers can still receive and delete" in text, text
            free = free_bytes(small_disk)
            assert free >= (RESERVE_MB << 20) - 4 * BODY, "the reserve was written into"
            assert len(sent) >= 4 * 5, f"only {len(sent)} messages went in before the refusal"
            metrics = _metrics(small_disk / "data")  # what an operator's alert reads
            assert metrics["zmqueue_disk_min_free_bytes"] == RESERVE_MB << 20
            assert metrics["zmqueue_disk_free_bytes"] < (RESERVE_MB << 20) + 4 * BODY
            # what an operator sees in the Consul UI once the free space is under the
            # reserve (the refusal above may leave it just over): an advisory warning
            # check on the service, which leaves the host passing (clients go on reaching it)
            # (the check may already stand, saying the free space is *within* a quarter of the
            # reserve: wait for its notes to say *below*; the host replaces the check to change
            # them, so read the status and the host's health from one listing, not two)
            (small_disk / "filler2").write_bytes(b"\0" * (512 << 10))
            output = wait_for(lambda: (o := _disk_warning(consul_agent, h.node)) and "MiB free" in o
                              and "within" not in o and o, 15, "the disk: warning check saying below")
            assert f"below this host's {RESERVE_MB} MiB reserve" in output, output
            info = wait_for(lambda: next((i for i in list_hosts(ConsulClient([consul_agent.http_addr], 5))
                                          if i.node == h.node and i.disk_status == "warning"), None),
                            15, "the disk: warning in the host's listing")
            assert info.passing, info

            # the host serves on, and a consumer drains every acknowledged message
            received: dict[str, bytes] = {}

            def drain() -> bool:
                got = q.receive(max_messages=10, visibility_timeout=600)
                if got:
                    assert q.delete_batch([m.receipt for m in got]) == [None] * len(got)
                    for m in got:
                        assert m.id not in received, f"{m.id} received twice"
                        received[m.id] = m.body
                return len(received) == len(sent)

            wait_for(drain, 60, "every acknowledged message received and deleted", interval_s=0)
            assert received == sent
            assert h.alive()
            with pytest.raises(DiskFull):  # deleting frees nothing on disk yet: still refused
                q.send_batch([os.urandom(BODY) for _ in range(4)])

            filler.unlink()  # space returns: sends are taken again within a moment
            (small_disk / "filler2").unlink()

            def takes_a_send() -> bool:
                try:
                    q.send(b"after")
                except DiskFull:
                    return False
                return True

            wait_for(takes_a_send, 10, "a send taken after the space returned")
            wait_check_removed(consul_agent, h.node, f"disk:zmqueue-{h.node}", 15,
                               "the disk: check removed once the disk has room again")
            [m] = q.receive(max_messages=10, wait_time=5)
            assert m.body == b"after"
    finally:
        h.stop()


def test_a_standard_queue_send_a_host_refuses_for_disk_goes_to_a_replica_with_room(
        two_small_disks: tuple[Path, Path], hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """Each replica of a standard queue writes a stream of its own, so a send
    the preferred host refuses with DISK_FULL (nothing stored) is taken by
    the other, through ``send_batch`` and through a pipeline; only when every
    host refuses does the caller get DiskFull."""
    started = [hosts.start(f"h{i}", data_dir=disk / "data",
                           extra_args=["--min-free-disk-mb", str(RESERVE_MB)])
               for i, disk in enumerate(two_small_disks, 1)]
    try:
        for h in started:
            wait_for(partial(_passing, consul_agent, h.node), 60, f"{h.node} passing")
        endpoint_of = {i.node: i.client_endpoint
                       for i in list_hosts(ConsulClient([consul_agent.http_addr], 5))}
        disk_of = {endpoint_of[h.node]: disk for h, disk in zip(started, two_small_disks, strict=True)}
        with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
            q = client.create_queue("two-disks", replication_factor=2)
            sent = {q.send(b"before"): b"before"}
            preferred, other = q.routes.for_send(0)
            fill_below_reserve(disk_of[preferred])
            wait_for(lambda: _refused_by(client, preferred, sent), 10,
                     "the preferred host refusing sends")

            bodies = [os.urandom(BODY) for _ in range(4)]
            sent.update(zip(q.send_batch(bodies), bodies, strict=True))
            with q.pipeline() as pipe:
                pending = [pipe.send(f"p{i}".encode()) for i in range(20)]
            assert all(s.id is not None and s.error is None for s in pending)
            sent.update({str(s.id): f"p{i}".encode() for i, s in enumerate(pending)})
            assert _refused_by(client, preferred, sent), "the preferred host took a send again"

            fill_below_reserve(disk_of[other])
            wait_for(lambda: _refused(q, sent), 10, "a send refused by both hosts")

            received: dict[str, bytes] = {}

            def drain() -> bool:
                got = q.receive(max_messages=10, visibility_timeout=600)
                if got:
                    assert q.delete_batch([m.receipt for m in got]) == [None] * len(got)
                    received.update((m.id, m.body) for m in got)
                return len(received) >= len(sent)

            wait_for(drain, 60, "every acknowledged message received", interval_s=0)
            assert received == sent
            assert all(h.alive() for h in started)
    finally:
        for h in started:
            h.stop()


def _passing(agent: ConsulAgent, node: str) -> bool:
    return all_passing(check_statuses(agent, node))


def _refused(q: zmqueue.Queue, sent: dict[str, bytes]) -> bool:
    """Whether a send is refused (a host reads its free space every 0.1 s, so
    one taken just after the filler was written is recorded in ``sent``)."""
    bodies = [os.urandom(BODY) for _ in range(4)]
    try:
        sent.update(zip(q.send_batch(bodies), bodies, strict=True))
    except DiskFull as exc:
        assert "kept free" in str(exc), str(exc)
        return True
    return False


def _refused_by(client: zmqueue.Client, endpoint: str, sent: dict[str, bytes]) -> bool:
    """Whether the host at ``endpoint`` itself refuses a send of 4 bodies (one
    it takes, before its next read of the free space, is recorded in ``sent``)."""
    bodies = [os.urandom(BODY) for _ in range(4)]
    try:
        reply = client.request(endpoint, Command.SEND, {"q": "two-disks", "p": 0, "b": bodies})
    except DiskFull:
        return True
    ids = sent_ids(reply)
    assert ids is not None and len(ids) == 4, reply
    sent.update(zip(ids, bodies, strict=True))
    return False


def _metrics(data_dir: Path) -> dict[str, float]:
    """The host's unlabelled /metrics samples (its endpoint from host.json)."""
    endpoint = json.loads((data_dir / "host.json").read_text())["http_endpoint"]
    with urllib.request.urlopen(endpoint + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return {name: float(value) for name, _, value in
            (line.partition(" ") for line in text.splitlines() if line and not line.startswith("#"))
            if "{" not in name}


def _disk_warning(agent: ConsulAgent, node: str) -> str | None:
    """The output of the host's ``disk:`` check while it is a warning."""
    entry = service_entry(agent, node) or {}
    for check in entry.get("Checks", []):
        if check["CheckID"] == f"disk:zmqueue-{node}" and check["Status"] == "warning":
            return str(check["Output"])
    return None
