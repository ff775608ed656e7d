"""Encryption at rest on a real host: sealed segments recover after a restart."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue.errors import Unavailable
from zmqueue.security import atrest


def _start(hosts: HostFactory, key_dir: Path, data_dir: Path | None = None):
    h = hosts.start("h1", extra_args=["--key-dir", str(key_dir)], data_dir=data_dir)
    wait_for(lambda: all_passing(check_statuses(hosts.agent, h.node)), 20, "host passing")
    return h


def test_encrypted_segments_contain_no_plaintext_and_recover_after_restart(hosts: HostFactory,
                                                                          tmp_path: Path) -> None:
    key_dir = tmp_path / "keys"
    name = f"sealed-{uuid.uuid4().hex[:8]}"
    atrest.add_key(key_dir, name)
    h = _start(hosts, key_dir)
    secret = b"CARD-4111-1111-" + uuid.uuid4().hex.encode()
    with zmqueue.connect(hosts.agent.http_addr, request_timeout=5) as c:
        q = c.create_queue(name, encrypted=True, fsync="always")
        q.send_batch([secret + bytes([i]) for i in range(10)])
        atrest.add_key(key_dir, name)  # rotate: new writes use key 2, key 1 still opens
    h.stop()
    files = [f for f in (h.data_dir / "queues" / name).rglob("*") if f.is_file()]
    assert files and all(secret not in f.read_bytes() for f in files)
    h2 = hosts.restart(h)
    wait_for(lambda: all_passing(check_statuses(hosts.agent, h2.node)), 20, "host passing again")
    with zmqueue.connect(hosts.agent.http_addr, request_timeout=5) as c:
        q = c.get_queue(name)
        q.send(secret + b"-after-rotation")
        bodies: set[bytes] = set()
        def all_back() -> bool:
            bodies.update(m.body for m in q.receive(max_messages=10, wait_time=1))
            return len(bodies) == 11

        wait_for(all_back, 20, "every message back after the restart")
    assert bodies == {secret + bytes([i]) for i in range(10)} | {secret + b"-after-rotation"}
    assert all(secret not in f.read_bytes() for f in (h.data_dir / "queues" / name).rglob("*")
               if f.is_file())


def test_a_cipher_opens_what_older_keys_sealed_and_refuses_tampering(tmp_path: Path) -> None:
    atrest.add_key(tmp_path, "q")
    old = atrest.KeyDir(tmp_path).cipher("q")
    sealed = old.seal(b"body", b"m" * 16, b"b")
    assert sealed[0] == atrest.MAGIC and sealed[1] == 1 and b"body" not in sealed
    atrest.add_key(tmp_path, "q")
    new = atrest.KeyDir(tmp_path).cipher("q")
    assert new.current == 2 and new.open(sealed, b"m" * 16, b"b") == b"body"
    assert new.seal(b"x", b"m" * 16, b"b")[1] == 2
    with pytest.raises(Unavailable):
        new.open(sealed, b"n" * 16, b"b")  # bound to its message id
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(Unavailable):
        new.open(tampered, b"m" * 16, b"b")
    with pytest.raises(Unavailable):
        atrest.KeyDir(tmp_path / "none").cipher("q").seal(b"x", b"m" * 16, b"b")
    ids = b"a" * 16 + b"b" * 16 + b"c" * 16
    many = new.seal_many([b"one", b"", b"three"], ids, b"b")
    assert many[1] == b"" and len({m[2:14] for m in (many[0], many[2])}) == 2  # fresh nonces
    assert [new.open(m, ids[16 * i:16 * i + 16], b"b") for i, m in enumerate(many)] == [b"one", b"", b"three"]


def test_a_host_without_the_queues_key_refuses_receives_and_takes_nothing(
        hosts: HostFactory, tmp_path: Path) -> None:
    """Its key file gone (or unreadable), a host used to mark the messages in
    flight, fail to open them and answer nothing: they came back later with
    a receive count spent (with a DLQ, moved there unseen). Now the receive
    is refused naming what to do, nothing is taken, and once the key is back
    every message arrives on its first receive."""
    key_dir = tmp_path / "keys"
    name = f"nokey-{uuid.uuid4().hex[:8]}"
    atrest.add_key(key_dir, name)
    h = _start(hosts, key_dir)
    node = h.node  # (the same across the restarts)
    with zmqueue.connect(hosts.agent.http_addr, request_timeout=3) as c:
        q = c.create_queue(name, encrypted=True, visibility_timeout=600)
        q.send_batch([b"one", b"two", b"three"])
    h.stop()
    key_file = atrest.key_path(key_dir, name)
    saved = key_file.read_bytes()
    other_id = tmp_path / "other"  # a key file that holds another key id only (2, not 1)
    atrest.add_key(other_id, name)
    atrest.add_key(other_id, name)
    other = b"".join(line + b"\n"
                     for line in atrest.key_path(other_id, name).read_bytes().splitlines()[1:])
    # no key file, one the host cannot read, then one without the messages' key id
    cases = ((None, "no key for it"), (b"garbage\n", "no key for it"), (other, "no key with id 1"))
    for broken, says in cases:
        if broken is None:
            key_file.unlink()
        else:
            key_file.write_bytes(broken)
        h = hosts.restart(h)
        wait_for(lambda: all_passing(check_statuses(hosts.agent, node)), 20, "host passing")
        with zmqueue.connect(hosts.agent.http_addr, request_timeout=3) as c:
            q = c.get_queue(name)
            with pytest.raises(Unavailable, match=says) as refused:
                q.receive(max_messages=10, wait_time=0)
            for _ in range(3):  # more tries take nothing either, and spend no receive count
                with contextlib.suppress(Unavailable):
                    assert q.receive(max_messages=10, wait_time=0) == []
            if broken == b"garbage\n":
                assert "fix " in str(refused.value) and "expected" in str(refused.value)
            stats = q.stats()
            assert (stats["visible"], stats["in_flight"]) == (3, 0), stats
        h.stop()
    key_file.write_bytes(saved)
    h = hosts.restart(h)
    wait_for(lambda: all_passing(check_statuses(hosts.agent, node)), 20, "host passing")
    with zmqueue.connect(hosts.agent.http_addr, request_timeout=5) as c:
        got = c.get_queue(name).receive(max_messages=10, wait_time=5)
        assert sorted(m.body for m in got) == [b"one", b"three", b"two"]
        assert {m.receive_count for m in got} == {1}
