"""The front door on real CURVE-secured hosts and a real Consul: keys,
eavesdropping, policies, rate limits, replication between hosts, metrics,
usage records and encryption at rest."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import zmq

from tests.conftest import wait_for
from tests.security.harness import Relay, SecureCluster, host_info, metric, scrape
from zmqueue.client.transport import Connection
from zmqueue.controlplane import keyring
from zmqueue.errors import AccessDenied, ConnectionLost, RequestTimeout, Throttled
from zmqueue.protocol import Command
from zmqueue.security.curve import CurveKeys
from zmqueue.security.usage import aggregate, find_files


def qname(base: str) -> str:
    return f"{base}-{uuid.uuid4().hex[:8]}"


def test_a_registered_client_sends_and_receives_over_curve(secure: SecureCluster) -> None:
    q = secure.clients["alice"].create_queue(qname("basic"))
    q.send(b"hello over curve")
    msgs = q.receive(wait_time=5)
    assert [m.body for m in msgs] == [b"hello over curve"]
    q.delete(msgs[0].receipt)


def test_an_unregistered_key_is_refused(secure: SecureCluster, tmp_path) -> None:
    from zmqueue.security import curve

    _, sec = curve.generate(tmp_path, "mallory")  # never registered
    keys = CurveKeys.from_file(sec)
    info = host_info(secure.hosts[0])
    pub = next(h.meta["curve_public"] for h in secure.clients["alice"].hosts(True)
               if h.client_endpoint == info["client_endpoint"])
    keys.default_server = pub.encode()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    conn = Connection(ctx, info["client_endpoint"], curve=keys)
    plain = Connection(ctx, info["client_endpoint"])  # no CURVE at all
    try:
        # both fail at the refused handshake (not at the long timeout), saying why
        with pytest.raises(ConnectionLost, match=r"refused this client's CURVE key.*zmqueue keys register"):
            conn.request(Command.PING, None, timeout_ms=60_000)
        with pytest.raises(ConnectionLost, match="CURVE is on at one end only"):
            plain.request(Command.PING, None, timeout_ms=60_000)
    finally:
        conn.close()
        plain.close()
        ctx.term()
    denied = wait_for(lambda: metric(scrape(secure.hosts[0]), "zmqueue_zap_events_total",
                                     event="zap_denied"), 15, "a ZAP denial counted")
    assert denied >= 1


def _capture_send(endpoint: str, target_port: int, payload: bytes, keys: CurveKeys | None) -> bytes:
    relay = Relay(("127.0.0.1", target_port))
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        if keys is not None:
            keys.learn({relay.endpoint: keys.server_key(endpoint) or b""})
        conn = Connection(ctx, relay.endpoint, curve=keys)
        return_body = conn.request(Command.PING, {"pad": payload}, timeout_ms=5000)
        assert return_body["pong"] is True
        conn.close()
        time.sleep(0.1)
        with relay.lock:
            return bytes(relay.captured)
    finally:
        ctx.term()
        relay.stop()


def test_eavesdropping_on_a_curve_socket_shows_no_plaintext(secure: SecureCluster) -> None:
    alice = secure.clients["alice"]
    info = host_info(secure.hosts[0])
    endpoint = info["client_endpoint"]
    port = int(endpoint.rsplit(":", 1)[1])
    secret = b"TOP-SECRET-PAYLOAD-" + uuid.uuid4().hex.encode()
    alice.curve_for(endpoint)
    assert alice.curve is not None
    keys = CurveKeys(alice.curve.public, alice.curve.secret)
    keys.learn({endpoint: alice.curve.server_key(endpoint) or b""})
    captured = _capture_send(endpoint, port, secret, keys)
    assert len(captured) > len(secret)  # the request and its reply went through the relay
    assert secret not in captured
    # the same relay on a plaintext socket does see the payload (the capture works)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    plain_port = router.bind_to_random_port("tcp://127.0.0.1")

    def echo() -> None:
        if router.poll(5000):
            ident, data = router.recv_multipart()
            from zmqueue import protocol

            f = protocol.decode(data)
            router.send_multipart([ident, protocol.encode_reply(f.command, f.request_id, {"pong": True})])

    import threading

    t = threading.Thread(target=echo)
    t.start()
    try:
        plain = _capture_send(f"tcp://127.0.0.1:{plain_port}", plain_port, secret, None)
    finally:
        t.join()
        router.close(0)
        ctx.term()
    assert secret in plain


def test_hosts_replicate_to_each_other_over_curve(secure: SecureCluster) -> None:
    q = secure.clients["alice"].create_queue(qname("repl"), replication_factor=2)
    q.send_batch([f"r{i}".encode() for i in range(20)])

    def applied() -> float:
        return sum(metric(scrape(h), "zmqueue_replication_events_total", event="applied")
                   for h in secure.hosts)

    assert wait_for(lambda: applied() >= 20, 10, "records applied on the replica")


def test_policy_edits_in_kv_take_effect(secure: SecureCluster) -> None:
    alice, bob = secure.clients["alice"], secure.clients["bob"]
    name = qname("pol")
    q = alice.create_queue(name)
    keyring.put_policy(secure.consul, name, {"send": ["alice"], "receive": ["alice"],
                                             "delete": ["alice"], "admin": ["alice"]})
    bq = bob.get_queue(name)

    def bob_denied() -> AccessDenied | None:
        try:
            bq.send(b"from bob")
        except AccessDenied as exc:
            return exc
        return None

    exc = wait_for(bob_denied, 10, "bob refused by the new policy")
    assert exc.details["action"] == "send" and exc.details["queue"] == name
    assert "send" in str(exc) and name in str(exc)
    with pytest.raises(AccessDenied) as rexc:
        bq.receive()
    assert rexc.value.details["action"] == "receive"
    q.send(b"from alice")  # alice still may
    keyring.put_policy(secure.consul, name, {"send": ["alice", "bob"], "receive": ["*"]})
    wait_for(lambda: bob_denied() is None, 10, "bob allowed after the policy edit")
    keyring.delete_policy(secure.consul, name)


def test_a_client_over_its_rate_is_throttled_then_succeeds_after_backing_off(secure: SecureCluster) -> None:
    name = qname("rate")
    secure.clients["alice"].create_queue(name, client_rate_limit_per_s=2, rate_burst=2)
    impatient = secure.connect("alice", throttle_retries=0)
    try:
        iq = impatient.get_queue(name)
        iq.send(b"1")
        iq.send(b"2")
        with pytest.raises(Throttled) as exc:
            iq.send(b"3")
        assert 0 < exc.value.details["retry_after_ms"] <= 1000
    finally:
        impatient.close()
    patient = secure.clients["alice"].get_queue(name)
    started = time.monotonic()
    for i in range(4):
        patient.send(f"p{i}".encode())  # backs off, honoring retry_after_ms
    assert time.monotonic() - started >= 1.0  # 4 sends at 2/s after an empty bucket
    # bob has his own bucket
    secure.clients["bob"].get_queue(name).send(b"bob")


def _sum(name: str, secure: SecureCluster, **labels: str) -> float:
    return sum(metric(scrape(h), name, **labels) for h in secure.hosts)


def test_pushes_and_pushed_redeliveries_are_counted(secure: SecureCluster) -> None:
    name = qname("pushcount")
    q = secure.clients["alice"].create_queue(name, visibility_timeout=1)
    q.send(b"never deleted")
    counts: list[int] = []
    with q.subscribe(lambda m: counts.append(m.receive_count), prefetch=1, auto_delete=False):
        wait_for(lambda: len(counts) >= 2, 20, "pushed again after its visibility timeout")
    assert counts[:2] == [1, 2]
    pushed = _sum("zmqueue_queue_pushed_total", secure, queue=name)
    assert pushed >= len(counts) >= 2
    assert _sum("zmqueue_queue_redeliveries_total", secure, queue=name) == pushed - 1
    assert _sum("zmqueue_queue_receives_total", secure, queue=name) == 0


def test_push_credits_that_carry_deletes_are_rate_limited_and_retried(secure: SecureCluster) -> None:
    """A CREDIT carrying auto_delete's deletes costs a token like a DELETE;
    the subscription retries a throttled one, so every message is deleted
    once and nothing is handed over twice (and the pushes are counted)."""
    name = qname("pushrate")
    q = secure.clients["alice"].create_queue(name, client_rate_limit_per_s=2, rate_burst=2)
    secure.clients["bob"].get_queue(name).send_batch([f"m{i}".encode() for i in range(12)])
    got: list[bytes] = []
    with q.subscribe(lambda m: got.append(m.body), prefetch=2) as sub:
        wait_for(lambda: _sum("zmqueue_queue_deletes_total", secure, queue=name) == 12, 30,
                 "all 12 deleted through throttled credits")
        assert sub.handled == 12 and sub.dropped == 0
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(12))
    assert _sum("zmqueue_queue_throttled_total", secure, queue=name) > 0
    assert _sum("zmqueue_queue_pushed_total", secure, queue=name) == 12


def test_a_credit_cannot_slip_deletes_past_the_policy(secure: SecureCluster,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """bob may receive, not delete. (A CREDIT deleting by reference with a
    ``del`` beside it that the front door could not read was let through
    unchecked, and the messages were deleted.)"""
    from zmqueue.client.subscription import Subscription

    name = qname("creditpol")
    q = secure.clients["alice"].create_queue(name, visibility_timeout=60)
    keyring.put_policy(secure.consul, name, {"send": ["alice"], "receive": ["alice", "bob"],
                                             "delete": ["alice"], "admin": ["alice"]})
    bq = secure.clients["bob"].get_queue(name)
    wait_for(lambda: _denied(lambda: bq.send(b"bob may not send")), 10, "the policy in force")
    real = Subscription._credit_request

    def with_del(self: Subscription, conn: Connection, body: dict[str, Any]) -> Any:
        if body.get("dref") is not None:
            body = {**body, "del": ["x"]}
        return real(self, conn, body)

    monkeypatch.setattr(Subscription, "_credit_request", with_del)
    q.purge()  # (a probe sent before the policy was in force)
    q.send_batch([f"m{i}".encode() for i in range(10)])
    before = _sum("zmqueue_queue_denied_total", secure, queue=name)
    with bq.subscribe(lambda m: None, prefetch=10) as sub:
        wait_for(lambda: sub.handled == 10, 20, "bob handled the 10 pushed messages")
        wait_for(lambda: _sum("zmqueue_queue_denied_total", secure, queue=name) > before, 10,
                 "the credit's deletes refused")
    assert q.stats()["total"] == 10, "nothing was deleted"
    keyring.delete_policy(secure.consul, name)


def _denied(call: Any) -> bool:
    try:
        call()
    except AccessDenied:
        return True
    return False


def test_a_client_key_under_a_hosts_name_is_refused(secure: SecureCluster, tmp_path, capsys) -> None:
    from zmqueue.cli.main import main

    host = secure.hosts[0].node
    assert main(["keys", "generate", "--out", str(tmp_path), "--name", "mallory"]) == 0
    assert main(["keys", "register", "--public", str(tmp_path / "mallory.key"), "--role", "client",
                 "--name", host, "--consul", secure.agent.http_addr]) == 1
    err = capsys.readouterr().err
    assert f"the name {host!r} is registered for a host key" in err and "pick another name" in err


def test_a_receive_pipeline_works_over_curve_and_rides_out_its_rate_limit(secure: SecureCluster) -> None:
    """Its own connections do the CURVE handshake; its RECEIVEs (ahead, and
    carrying deletes) are rate limited like any, and a throttled one falls
    back to the plain receive, which backs off: every message is received
    and deleted once."""
    name = qname("rpipe")
    q = secure.clients["alice"].create_queue(name, visibility_timeout=60, client_rate_limit_per_s=5,
                                             rate_burst=5)
    sent = secure.clients["bob"].get_queue(name).send_batch([f"r{i}".encode() for i in range(40)])
    got: list[str] = []
    with q.receive_pipeline(max_messages=4, wait_time=0.5) as pipe:
        deadline = time.monotonic() + 60
        while len(got) < 40 and time.monotonic() < deadline:
            msgs = pipe.receive()
            got += [m.id for m in msgs]
            pipe.delete(msgs)
        assert pipe.requests > 0, "requests went ahead on the pipeline's own CURVE connections"
    assert sorted(got) == sorted(sent)
    assert pipe.failed_deletes == []
    assert _sum("zmqueue_queue_throttled_total", secure, queue=name) > 0
    wait_for(lambda: _sum("zmqueue_queue_deletes_total", secure, queue=name) == 40, 10, "all deleted")


def test_metrics_reflect_a_known_workload_exactly(secure: SecureCluster) -> None:
    name = qname("metrics")
    q = secure.clients["alice"].create_queue(name)
    for _ in range(3):
        q.send_batch([bytes(100) for _ in range(10)])
    got: list[Any] = []
    while len(got) < 12:
        got += q.receive(max_messages=12 - len(got), wait_time=2)
    errs = q.delete_batch([m.receipt for m in got[:8]])
    assert errs == [None] * 8
    q.change_visibility(got[8].receipt, 0)
    again = q.receive(max_messages=1, wait_time=2)
    assert again and again[0].receive_count == 2
    expect = {"zmqueue_queue_sends_total": 30, "zmqueue_queue_receives_total": 13,
              "zmqueue_queue_deletes_total": 8, "zmqueue_queue_redeliveries_total": 1,
              "zmqueue_queue_visible": 18, "zmqueue_queue_in_flight": 4, "zmqueue_queue_delayed": 0,
              "zmqueue_queue_throttled_total": 0, "zmqueue_queue_denied_total": 0}
    for metric_name, value in expect.items():
        assert _sum(metric_name, secure, queue=name) == value, metric_name
    assert _sum("zmqueue_queue_bytes_in_total", secure, queue=name) > 3000
    assert _sum("zmqueue_queue_oldest_age_seconds", secure, queue=name) > 0
    assert _sum("zmqueue_request_latency_seconds_count", secure, command="SEND") >= 3
    assert _sum("zmqueue_commit_seconds_count", secure, phase="flush") >= 3


def test_usage_records_count_requests_and_bytes_per_identity_and_queue(secure: SecureCluster, capsys) -> None:
    from zmqueue.cli.main import main

    name = qname("usage")
    q = secure.clients["alice"].create_queue(name)
    q.send_batch([b"x" * 1000 for _ in range(5)])
    q.send(b"y" * 500)
    secure.clients["bob"].get_queue(name).send(b"z" * 200)
    dirs = [h.data_dir for h in secure.hosts]

    def rows() -> dict[str, dict[str, int]]:
        return {r["identity"]: r for r in aggregate(find_files(dirs)) if r["queue"] == name}

    def flushed() -> dict[str, dict[str, int]] | None:
        r = rows()  # every host flushes on its own: wait for both identities' records
        ok = r.get("alice", {}).get("requests", 0) >= 3 and r.get("bob", {}).get("requests", 0) >= 2
        return r if ok else None

    got = wait_for(flushed, 10, "usage flushed")
    # alice: CREATE_QUEUE, a GET_QUEUE poll per 50 ms until the queue has a
    # writer (none when the create reply names one already), two SENDs
    assert got["alice"]["requests"] >= 3 and got["alice"]["bytes_in"] > 5500
    # bob: GET_QUEUE and one SEND (sent twice if redirected while the writer settles)
    assert got["bob"]["requests"] in (2, 3)
    assert 200 < got["bob"]["bytes_in"] < 600 and got["bob"]["bytes_out"] > 0
    assert main(["usage", "--data", *map(str, dirs), "--csv", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("identity,queue,requests,bytes_in,bytes_out")
    assert f"bob,{name},2," in out


def test_encrypted_segments_hold_no_plaintext(secure: SecureCluster) -> None:
    name = qname("sealed")
    secure.data_key(name)
    q = secure.clients["alice"].create_queue(name, encrypted=True, fsync="always", replication_factor=2)
    secret = b"PLAINTEXT-NEVER-ON-DISK-" + uuid.uuid4().hex.encode()
    q.send(secret, attributes={"card": "4111-SECRET-ATTR"})
    msgs = q.receive(wait_time=5)
    assert msgs and msgs[0].body == secret and msgs[0].attributes == {"card": "4111-SECRET-ATTR"}

    def on_disk() -> list[bytes]:
        out = []
        for h in secure.hosts:
            for f in (h.data_dir / "queues" / name).rglob("*"):
                if f.is_file():
                    out.append(f.read_bytes())
        return out

    wait_for(lambda: len(on_disk()) >= 2, 15, "segments on both replicas")
    time.sleep(0.5)
    blobs = on_disk()
    assert all(secret not in b and b"4111-SECRET-ATTR" not in b for b in blobs)


def test_keys_cli_registers_lists_and_revokes(secure: SecureCluster, tmp_path, capsys) -> None:
    from zmqueue.cli.main import main

    addr = secure.agent.http_addr
    assert main(["keys", "generate", "--out", str(tmp_path), "--name", "carol"]) == 0
    assert main(["keys", "register", "--public", str(tmp_path / "carol.key"), "--role", "client",
                 "--name", "carol", "--consul", addr]) == 0
    assert main(["keys", "list", "--consul", addr]) == 0
    assert "carol" in capsys.readouterr().out
    sec = str(tmp_path / "carol.key_secret")

    def carol_pings() -> bool:
        import zmqueue

        with zmqueue.connect(addr, request_timeout=1, retries=0, curve_secret_file=sec) as c:
            try:
                return bool(c.ping())
            except RequestTimeout:
                return False

    assert wait_for(carol_pings, 10, "carol admitted")
    assert main(["keys", "revoke", "--name", "carol", "--consul", addr]) == 0
    assert wait_for(lambda: not carol_pings(), 10, "carol refused after the revocation")
    capsys.readouterr()
    assert main(["keys", "revoke", "--name", "carol", "--consul", addr]) == 1
    assert capsys.readouterr().err.startswith("zmqueue keys revoke: error: no key 'carol' is registered")


def test_metrics_count_dead_letter_moves_and_replication_lag(secure: SecureCluster) -> None:
    alice = secure.clients["alice"]
    name, dlq = qname("src"), qname("dlq")
    q = alice.create_queue(name, dead_letter_queue=dlq, max_receive_count=1)
    q.send(b"poison")
    assert q.receive(wait_time=2, visibility_timeout=0)
    assert q.receive(wait_time=1, visibility_timeout=0) == []  # received once too often: moved
    d = alice.get_queue(dlq)
    assert wait_for(lambda: d.receive(wait_time=1), 10, "the message in the DLQ")
    assert wait_for(lambda: _sum("zmqueue_queue_dlq_moves_total", secure, queue=name) == 1, 15, "one move")
    repl = alice.create_queue(qname("lag"), replication_factor=2)
    repl.send_batch([b"r"] * 50)

    def lags() -> list[float]:
        text = "\n".join(scrape(h) for h in secure.hosts)
        return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("zmqueue_replication_lag_records{") and f"{repl.name}/0/" in line]

    assert wait_for(lambda: (got := lags()) and all(v == 0 for v in got), 10, "replicas caught up")


def test_an_encrypted_queues_dead_letters_stay_encrypted(secure: SecureCluster) -> None:
    """(The dead-letter queue created for an encrypted queue was not
    encrypted: dead letters were stored in plaintext.)"""
    import zmqueue

    alice = secure.clients["alice"]
    name, dlq = qname("sealsrc"), qname("sealdlq")
    secure.data_key(name)
    secure.data_key(dlq)
    q = alice.create_queue(name, encrypted=True, visibility_timeout=1, dead_letter_queue=dlq,
                           max_receive_count=1, fsync="always")
    assert alice.get_queue(dlq).config.encrypted, "the dead-letter queue was created encrypted"
    secret = b"DEAD-LETTER-NEVER-PLAIN-" + uuid.uuid4().hex.encode()
    q.send(secret)
    assert [m.body for m in q.receive(wait_time=5)] == [secret]
    wait_for(lambda: q.receive(wait_time=1) == [] and alice.get_queue(dlq).stats()["total"] == 1, 30,
             "the message moved to the dead-letter queue")
    [d] = alice.get_queue(dlq).receive(wait_time=5)
    assert d.body == secret and d.dead_letter_source == name
    blobs = [f.read_bytes() for h in secure.hosts for f in (h.data_dir / "queues" / dlq).rglob("*.seg")]
    assert blobs and all(secret not in b for b in blobs), "no dead letter in plaintext on disk"
    plain = qname("plaindlq")
    alice.create_queue(plain)
    with pytest.raises(zmqueue.InvalidParameter, match="would be stored there in plaintext"):
        alice.create_queue(qname("sealsrc2"), encrypted=True, dead_letter_queue=plain)
