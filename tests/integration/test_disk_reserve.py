"""A host whose disk runs low: its data directory on a small tmpfs.

Below the host's reserve (``--min-free-disk-mb``) sends get DISK_FULL with a
message that says what is free, what is kept and what to do; the host keeps
serving, every acknowledged message is received and deleted (receives and
deletes still have room to be logged), and sends work again once space is
freed. Mounting the tmpfs needs root (CI runs as root; elsewhere the test is
skipped, saying so)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue.errors import DiskFull
from zmqueue.localcluster import ConsulAgent

TMPFS_MB = 24
RESERVE_MB = 8
FILLER_MB = 8
BODY = 60_000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


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
            free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
            assert free >= (RESERVE_MB << 20) - 4 * BODY, "the reserve was written into"
            assert len(sent) >= 4 * 5, f"only {len(sent)} messages went in before the refusal"

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

            def takes_a_send() -> bool:
                try:
                    q.send(b"after")
                except DiskFull:
                    return False
                return True

            wait_for(takes_a_send, 10, "a send taken after the space returned")
            [m] = q.receive(max_messages=10, wait_time=5)
            assert m.body == b"after"
    finally:
        h.stop()
