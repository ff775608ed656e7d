"""Pipelined sends (``Queue.pipeline``): many single-message sends in flight
from one thread, coalesced into fewer requests under load, each confirmed or
failed on its own, retried through a host's kill -9, refused for FIFO queues."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import zmqueue
from tests.conftest import HostFactory, QueueCluster, wait_for
from tests.replication.test_failover import client, drain, three_hosts
from tests.security.harness import metric, scrape
from zmqueue.localcluster import ConsulAgent

__all__ = ["client"]


def _sends_answered(qcluster: QueueCluster) -> float:
    return sum(metric(scrape(h), "zmqueue_request_latency_seconds_count", command="SEND")
               for h in qcluster.factory.hosts)


def test_pipelined_sends_are_each_their_own_request_with_many_in_flight(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("piped"), partitions=2, visibility_timeout=60)
    before = _sends_answered(qcluster)
    confirmed: list[zmqueue.PendingSend] = []
    bodies = [f"m{i:03d}".encode() for i in range(300)]
    pending: list[zmqueue.PendingSend] = []
    most_in_flight = 0
    with q.pipeline(window=16, on_done=confirmed.append, max_requests=16) as pipe:
        for b in bodies:
            p = pipe.send(b)
            assert not p.done, "send() returned before its reply was read"
            pending.append(p)
            most_in_flight = max(most_in_flight, len(pending) - len(confirmed))
    assert 2 <= most_in_flight <= 16, "several sends in flight at once, never more than the window"
    assert all(p.id and p.error is None for p in pending)
    assert len({p.id for p in pending}) == 300
    assert sorted(p.index for p in confirmed) == list(range(300)), "on_done once per message"
    assert {p.partition for p in pending} == {0, 1}, "messages spread over both partitions"
    # with max_requests >= window, each message was its own SEND request (metrics are
    # scraped, so poll)
    assert pipe.requests == 300
    wait_for(lambda: _sends_answered(qcluster) - before >= 300, 10, "300 SEND requests counted")
    got = drain(q, 300)
    assert sorted(got.values()) == bodies
    assert set(got) == {p.id for p in pending}


def test_sends_made_while_the_requests_are_in_flight_go_together_each_with_its_own_id(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("piped-co"), partitions=2, visibility_timeout=60)
    before = _sends_answered(qcluster)
    bodies = [f"c{i:04d}".encode() for i in range(600)]
    with q.pipeline(window=100, max_requests=2) as pipe:
        pending = [pipe.send(b) for b in bodies]
    assert all(p.id and p.error is None for p in pending)
    assert len({p.id for p in pending}) == 600
    assert pipe.requests < 600, "sends made while 2 requests were unanswered were coalesced"
    assert len({p.request_id for p in pending}) == pipe.requests
    wait_for(lambda: _sends_answered(qcluster) - before == pipe.requests, 10,
             f"{pipe.requests} SEND requests counted by the hosts")
    got = drain(q, 600)
    assert got == {p.id: b for p, b in zip(pending, bodies, strict=True)}, \
        "each message stored under the id its PendingSend was given"


def test_later_sends_read_the_replies_that_came_long_before_the_window_fills(
        qcluster: QueueCluster) -> None:
    """``send`` looks for replies at most every POLL_EVERY_S, not on every
    call: a reply that came meanwhile must still be read by a later send,
    long before a full window would force a wait."""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-early"), visibility_timeout=60)
    with q.pipeline(window=1000) as pipe:
        first = pipe.send(b"first")
        deadline = time.monotonic() + 10
        sent = 1
        while not first.done:
            assert time.monotonic() < deadline, "the first send's reply was never read by a later send"
            assert sent < 990, "the first send was confirmed only once the window was nearly full"
            if sent % 20 == 0:  # a producer that works between sends: its replies come meanwhile
                time.sleep(0.002)
            pipe.send(b"later %d" % sent)
            sent += 1
        assert first.id and first.error is None
    assert len(drain(q, sent)) == sent


@pytest.mark.parametrize("max_requests", [1, 8])
def test_a_bad_message_fails_alone_and_the_with_block_raises_it(
        qcluster: QueueCluster, max_requests: int) -> None:
    """With max_requests=1 the bad message is sent in a coalesced group, which
    the host refuses whole: the group is sent again one message at a time."""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-bad"), max_message_bytes=1024)
    pipe = q.pipeline(window=8, max_requests=max_requests)
    sent = [pipe.send(b"x" * 10) for _ in range(5)]
    too_big = pipe.send(b"y" * 2048)
    sent += [pipe.send(b"z" * 10) for _ in range(5)]
    failed = pipe.flush()
    assert failed == [too_big]
    assert isinstance(too_big.error, zmqueue.MessageTooLarge) and too_big.id is None
    assert all(p.id for p in sent), "the messages around the bad one were confirmed"
    assert pipe.flush() == [], "a flush reports each failure once"
    with pytest.raises(zmqueue.MessageTooLarge), q.pipeline(window=4, max_requests=max_requests) as pipe2:
        pipe2.send(b"ok")
        pipe2.send(b"w" * 4096)
    assert len(drain(q, 11)) == 11, "10 + 1 confirmed messages, the too-large ones never stored"


def test_pipelines_refuse_bad_windows_and_fifo_ones_more_than_one_request(qcluster: QueueCluster) -> None:
    fifo = qcluster.client.create_queue(qcluster.queue_name("piped") + ".fifo", fifo=True)
    with pytest.raises(zmqueue.InvalidParameter, match="max_requests=1"):
        fifo.pipeline(max_requests=2)
    with pytest.raises(zmqueue.InvalidParameter, match="group_id"):
        fifo.pipeline().send(b"no group")
    std = qcluster.client.create_queue(qcluster.queue_name("piped-w"))
    for window in (0, 1001):
        with pytest.raises(zmqueue.InvalidParameter, match="window"):
            std.pipeline(window=window)
    for max_requests in (0, 1001):
        with pytest.raises(zmqueue.InvalidParameter, match="max_requests"):
            std.pipeline(max_requests=max_requests)


def test_pipelined_sends_in_flight_to_a_killed_host_are_retried_and_none_is_lost(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("piped-kill", replication_factor=3, sync_replication=True)
    taker_ep = q.routes.for_send(0)[0]
    taker = next(h for h in hs if h.node in {n for n, ep in q.routes.part(0).endpoints.items()
                                             if ep == taker_ep})
    pipe = q.pipeline(window=32)
    pending = [pipe.send(f"a{i}".encode()) for i in range(200)]
    taker.kill9()  # requests in flight to it fail at once (the connection drops) and go to another replica
    pending += [pipe.send(f"b{i}".encode()) for i in range(200)]
    failed = pipe.flush()
    assert failed == [], [str(p.error) for p in failed]
    assert pipe.retried >= 1, "some sends were in flight to the killed host or sent there after"
    confirmed = {p.id for p in pending if p.id}
    got = drain_until(q, confirmed, timeout_s=40)
    assert confirmed <= set(got), f"lost {len(confirmed - set(got))} confirmed messages"
    # a request in flight at the kill may have been stored there (and replicated)
    # before it was retried elsewhere: a duplicate under another id, at most one each
    doubled = len(got) - len(set(got.values()))
    assert set(got.values()) == {f"{x}{i}".encode() for x in "ab" for i in range(200)}
    assert doubled <= 32, f"{doubled} duplicates: more than the window in flight at the kill"


def drain_until(q: zmqueue.Queue, want: set[str], timeout_s: float) -> dict[str, bytes]:
    """Receive and delete until every id of ``want`` came (or the deadline);
    every message received, by id (duplicates of a send have their own ids)."""
    got: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout_s
    while not want <= got.keys() and time.monotonic() < deadline:
        msgs = q.receive(max_messages=100, wait_time=1)
        got.update((m.id, m.body) for m in msgs)
        if msgs:
            q.delete_batch(msgs)
    return got


def test_throttled_pipelined_sends_back_off_and_all_land_once(qcluster: QueueCluster) -> None:
    """Over the queue's rate limit a host answers THROTTLED: those sends go
    through the retry path (which honours retry_after_ms), none is lost or doubled."""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-rate"), rate_limit_per_s=20, rate_burst=5)
    started = time.monotonic()
    with q.pipeline(window=10, max_requests=10) as pipe:  # (a request costs a token, however many messages)
        pending = [pipe.send(f"r{i}".encode()) for i in range(30)]
    elapsed = time.monotonic() - started
    assert all(p.id for p in pending)
    assert pipe.retried >= 1, "some sends were throttled and sent again"
    assert elapsed >= 1.0, f"30 sends at 20/s after a burst of 5 took only {elapsed:.2f} s"
    got = drain_until(q, {p.id for p in pending if p.id}, timeout_s=20)
    assert sorted(got.values()) == sorted(f"r{i}".encode() for i in range(30))


def test_a_closed_client_says_so_instead_of_a_zeromq_error(qcluster: QueueCluster) -> None:
    c = zmqueue.connect(qcluster.client.consul_addresses[0], request_timeout=5)
    q = c.create_queue(qcluster.queue_name("closed"))
    q.send(b"before")
    pipe = q.pipeline(window=8)
    pipe.send(b"in flight")  # not answered yet: replies are read on the next send
    c.close()
    with pytest.raises(zmqueue.ClientClosed, match="connect again"):
        q.send(b"after")
    with pytest.raises(zmqueue.ClientClosed, match="closed"):
        q.receive()
    with pytest.raises(zmqueue.ClientClosed, match="outcome is unknown"):
        pipe.flush()
    with pytest.raises(zmqueue.ClientClosed):
        pipe.send(b"after")
    with pytest.raises(zmqueue.ClientClosed, match="connect again"):  # (was a ZMQError)
        q.subscribe(lambda m: None)
    idle = q.pipeline()  # nothing in flight: the send is refused, not settled with the error
    with pytest.raises(zmqueue.ClientClosed, match="connect again"):
        idle.send(b"after")


def waiting_in(thread: threading.Thread, function: str) -> bool:
    """``thread`` is inside ``function`` now (seen in its current stack)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_calls_waiting_in_other_threads_get_client_closed_when_the_client_closes(
        qcluster: QueueCluster) -> None:
    """Closing the client marks every other thread's sockets; a long poll or
    a request waiting on them in another thread closes them itself (a ZeroMQ
    socket must not be closed under the thread polling it) and ends with
    ClientClosed, not a ZeroMQ error escaping its thread; then the client's
    ZeroMQ context is released."""
    c = zmqueue.connect(qcluster.client.consul_addresses[0], request_timeout=5)
    q = c.create_queue(qcluster.queue_name("closing"))
    outcomes: list[BaseException | None] = []

    def receive_waiting() -> None:
        try:
            q.receive(wait_time=20)
            outcomes.append(None)
        except BaseException as exc:  # the outcome is what the test checks
            outcomes.append(exc)

    t = threading.Thread(target=receive_waiting, daemon=True)
    t.start()
    wait_for(lambda: waiting_in(t, "poll") and waiting_in(t, "long_poll"), 10, "the long poll waiting")
    c.close()
    t.join(10)
    assert not t.is_alive(), "the long poll ended once its client closed"
    [exc] = outcomes
    assert isinstance(exc, zmqueue.ClientClosed), repr(exc)
    assert "closed while this call waited" in str(exc)
    wait_for(lambda: c.ctx.closed, 10, "the client's ZeroMQ context released")


def test_close_while_another_thread_subscribes_returns_and_releases_the_context(
        qcluster: QueueCluster) -> None:
    """(close() closed the subscriptions it had when it started: one made
    meanwhile was tracked in a list nobody closed, its sockets kept the
    ZeroMQ context from terminating, and close() hung for good.)"""
    c = zmqueue.connect(qcluster.client.consul_addresses[0], request_timeout=5)
    q = c.create_queue(qcluster.queue_name("sub-closing"), partitions=2)
    subs: list[zmqueue.Subscription] = []
    outcomes: list[BaseException | None] = []
    three = threading.Event()

    def subscriber() -> None:
        try:
            for _ in range(100):  # (closing the first ones takes longer than making one)
                subs.append(q.subscribe(lambda m: None))
                if len(subs) == 3:
                    three.set()
            outcomes.append(None)
        except BaseException as exc:  # the outcome is what the test checks
            outcomes.append(exc)

    t = threading.Thread(target=subscriber, daemon=True)
    t.start()
    assert three.wait(30), outcomes
    closer = threading.Thread(target=c.close, daemon=True)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() returned"
    t.join(30)
    assert not t.is_alive() and len(outcomes) == 1
    assert isinstance(outcomes[0], zmqueue.ClientClosed), (len(subs), repr(outcomes[0]))
    wait_for(lambda: c.ctx.closed, 30, "the client's ZeroMQ context released")
    assert all(not s.thread.is_alive() for s in subs)


def test_closed_clients_keep_no_sockets(qcluster: QueueCluster) -> None:
    """(Each closed client kept its HTTP connection to the Consul agent open
    for as long as it was referenced.)"""
    import os

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    qcluster.client.list_queues()
    before = fds()
    kept = []
    for _ in range(20):
        c = zmqueue.connect(qcluster.client.consul_addresses[0], request_timeout=5)
        c.list_queues()
        c.close()
        kept.append(c)
    assert fds() - before < 10, f"{fds() - before} more file descriptors open after 20 closed clients"


def test_a_thread_idle_when_the_client_closes_gets_client_closed_on_its_next_call(
        qcluster: QueueCluster) -> None:
    """The idle thread's connection is closed by close() itself (no call of
    that thread is on it), so the client's ZeroMQ context is released at once."""
    c = zmqueue.connect(qcluster.client.consul_addresses[0], request_timeout=5)
    q = c.create_queue(qcluster.queue_name("idle-closing"))
    go, sent = threading.Event(), threading.Event()
    outcomes: list[BaseException | None] = []

    def worker() -> None:
        q.send(b"from the worker")  # opens this thread's connection
        sent.set()
        go.wait(30)
        try:
            q.send(b"after close")
            outcomes.append(None)
        except BaseException as exc:  # the outcome is what the test checks
            outcomes.append(exc)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    assert sent.wait(20)
    c.close()
    assert c.ctx.closed, "every socket was closed by close(): the context is released"
    go.set()
    t.join(10)
    [exc] = outcomes
    assert isinstance(exc, zmqueue.ClientClosed), repr(exc)


def test_any_mix_of_windows_requests_and_bad_messages_confirms_each_good_message_once(
        qcluster: QueueCluster) -> None:
    """Property: whatever the window, max_requests, partitions and where the
    too-large messages fall, every good message is confirmed under its own id
    (stored with its own body, once) and every bad one fails alone with
    MessageTooLarge. Drawn by hypothesis, run against a real cluster."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    queues = {p: qcluster.client.create_queue(qcluster.queue_name(f"piped-prop{p}"), partitions=p,
                                              max_message_bytes=1024, visibility_timeout=60)
              for p in (1, 3)}

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(window=st.integers(1, 40), max_requests=st.integers(1, 6), partitions=st.sampled_from([1, 3]),
           bad=st.lists(st.booleans(), min_size=1, max_size=80))
    def run(window: int, max_requests: int, partitions: int, bad: list[bool]) -> None:
        q = queues[partitions]
        bodies = [(b"x" * 2000 if is_bad else b"") + f"p{i}".encode() for i, is_bad in enumerate(bad)]
        pipe = q.pipeline(window=window, max_requests=max_requests)
        pending = [pipe.send(b) for b in bodies]
        failed = pipe.flush()
        assert failed == [p for p, is_bad in zip(pending, bad, strict=True) if is_bad]
        assert all(isinstance(p.error, zmqueue.MessageTooLarge) and p.id is None for p in failed)
        good = {p.id: b for p, b, is_bad in zip(pending, bodies, bad, strict=True) if not is_bad}
        assert None not in good and len(good) == bad.count(False), "one distinct id per good message"
        assert pipe.requests <= len(bodies)
        got = drain(q, len(good)) if good else {}
        assert got == good, "each good message stored once, under the id it was confirmed with"

    run()
    for q in queues.values():
        assert q.receive(max_messages=10, wait_time=0.5) == [], "nothing stored beyond the confirmed"


def _fifo_drain(q: zmqueue.Queue, expect: int, timeout_s: float = 30) -> list[zmqueue.Message]:
    got: list[zmqueue.Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expect and time.monotonic() < deadline:
        msgs = q.receive(max_messages=10, wait_time=1)
        got += msgs
        if msgs:
            q.delete_batch(msgs)
    return got


def test_a_fifo_pipeline_keeps_each_groups_order_with_one_request_in_flight(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("piped-fifo") + ".fifo", fifo=True, partitions=2)
    with q.pipeline(window=50) as pipe:
        assert pipe.max_requests == 1
        pending = [pipe.send(f"g{i % 3}-{i:03d}".encode(), group_id=f"g{i % 3}", dedup_id=f"d{i}")
                   for i in range(300)]
    assert all(p.id and p.error is None for p in pending)
    assert pipe.requests < 300, "the sends made while a request was in flight went together"
    got = _fifo_drain(q, 300)
    assert {m.id for m in got} == {p.id for p in pending} and len(got) == 300
    for g in range(3):
        bodies = [m.body for m in got if m.group_id == f"g{g}"]
        assert bodies == [f"g{g}-{i:03d}".encode() for i in range(g, 300, 3)], "a group's send order"
    # a dedup id seen in the last 5 minutes returns the first id, not a second message
    with q.pipeline() as again:
        dup = again.send(b"g0-000 again", group_id="g0", dedup_id="d0")
    assert dup.id == pending[0].id
    assert q.receive(max_messages=10, wait_time=0.5) == []


def test_a_fifo_send_that_fails_for_good_fails_the_later_ones_unsent(qcluster: QueueCluster) -> None:
    """A queue capped at 3 messages: the 4th send fails with QueueLimitReached.
    Its on_done frees room (another client takes and deletes the first
    message), yet the later sends fail too, unsent: nothing is stored after
    a failed send of the group. After the flush the pipeline sends again."""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-cap") + ".fifo", fifo=True, max_messages=3)
    other = zmqueue.connect(qcluster.factory.agent.http_addr)
    freed: list[bytes] = []

    def free_room(p: zmqueue.PendingSend) -> None:
        if p.error is not None and not freed:
            oq = other.get_queue(q.name)
            msgs = oq.receive(max_messages=1, wait_time=5)
            oq.delete_batch(msgs)
            freed.extend(m.body for m in msgs)

    try:
        pipe = q.pipeline(window=1, on_done=free_room)
        pending = [pipe.send(f"m{i}".encode(), group_id="g", dedup_id=f"d{i}") for i in range(6)]
        failed = pipe.flush()
        assert freed == [b"m0"], "room was made when the 4th send failed"
        assert [p.id is not None for p in pending] == [True] * 3 + [False] * 3
        assert failed == pending[3:]
        assert all(isinstance(p.error, zmqueue.QueueLimitReached) for p in failed)
        assert pipe.requests == 4, "the sends after the failed one were not sent"
        again = pipe.send(b"after the flush", group_id="g", dedup_id="d-after")
        assert pipe.flush() == [] and again.id, "a flush ends the failure's hold on the pipeline"
        got = _fifo_drain(q, 3)
        assert [m.body for m in got] == [b"m1", b"m2", b"after the flush"]
    finally:
        other.close()


def test_a_message_the_transport_cannot_send_fails_alone_and_loses_none_around_it(
        qcluster: QueueCluster) -> None:
    """(A request whose frame could not be built, here one over the request
    size limit, raised out of ``send`` after its coalesced group had left the
    pipeline: the messages sent with it were never sent and had no error.)"""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-unsendable"))
    pipe = q.pipeline(window=8, max_requests=1)
    ok = [pipe.send(b"ok1")]
    huge = pipe.send(b"bad", attributes={"blob": b"x" * (zmqueue.protocol.MAX_FRAME_BYTES + 1)})
    ok += [pipe.send(b"ok2"), pipe.send(b"ok3")]
    assert pipe.flush() == [huge]
    assert isinstance(huge.error, zmqueue.InvalidParameter) and "limit of one request" in str(huge.error)
    assert all(p.id for p in ok), "the messages around it were confirmed"
    assert sorted(drain(q, 3).values()) == [b"ok1", b"ok2", b"ok3"]


def test_closing_a_pipeline_fails_what_it_never_sent_with_not_sent(qcluster: QueueCluster) -> None:
    """(Leaving a ``with`` block by an exception left every unsent message
    with neither an id nor an error.)"""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-closed"))
    sent: list[zmqueue.PendingSend] = []
    with (pytest.raises(RuntimeError, match="the producer's own"),
          q.pipeline(window=64, max_requests=1) as pipe):
        sent += [pipe.send(f"m{i}".encode()) for i in range(20)]
        raise RuntimeError("the producer's own failure")
    not_sent = [p for p in sent if isinstance(p.error, zmqueue.NotSent)]
    unknown = [p for p in sent if p.error is None and p.id is None]
    assert not_sent, "the messages still waiting in the pipeline were not sent"
    assert all("send them again" in str(p.error) for p in not_sent)
    assert len(not_sent) + len(unknown) == 20 and all(p.id is None for p in sent)
    # the requests in flight at the close are stored (their replies were dropped), nothing else
    wait_for(lambda: q.stats()["total"] == len(unknown), 10, "the sends in flight at the close stored")
    assert sorted(drain(q, len(unknown)).values()) == sorted(p.wire[0] for p in unknown)
    # a closed pipeline refuses further calls (a send after close was stored
    # and its PendingSend never settled; flush() then answered [])
    total = q.stats()["total"]
    for call in (lambda: pipe.send(b"late"), pipe.flush, pipe.confirm_all):
        with pytest.raises(zmqueue.ClientClosed, match="this send pipeline was closed"):
            call()
    pipe.close()  # closing again does nothing
    with q.pipeline() as closed_inside:
        closed_inside.close()  # (and leaving the block then does not raise)
    assert q.stats()["total"] == total
    for bad in ("2", 1.5):
        with pytest.raises(zmqueue.InvalidParameter, match="max_requests"):
            q.pipeline(max_requests=bad)
    with pytest.raises(zmqueue.InvalidParameter, match="on_done"):
        q.pipeline(on_done=5)


def test_an_on_done_that_raises_does_not_disturb_the_pipeline(
        qcluster: QueueCluster, caplog: pytest.LogCaptureFixture) -> None:
    """(An exception from ``on_done`` came out of ``send``: that send's message
    was never sent and had no PendingSend; the replies read with the one being
    settled were thrown away, so their requests waited out the request timeout
    and were sent again; and the later messages of the same reply never heard
    ``on_done``.) Now it is logged and counted, and everything settles."""
    q = qcluster.client.create_queue(qcluster.queue_name("piped-on-done"), visibility_timeout=60)
    heard: list[int] = []
    raise_on = {1, 300, 301, 700, 1000}  # calls of on_done (the last one: from flush)

    def on_done(p: zmqueue.PendingSend) -> None:
        heard.append(p.index)
        if len(heard) in raise_on:
            raise RuntimeError("the application's callback fails")

    bodies = [b"m%d" % i for i in range(1000)]
    pipe = q.pipeline(window=400, on_done=on_done, max_requests=400)
    pending: list[zmqueue.PendingSend] = []
    escaped = 0
    for b in bodies:
        try:
            pending.append(pipe.send(b))
        except RuntimeError:
            escaped += 1
    try:
        failed = pipe.flush()
    except RuntimeError:
        escaped, failed = escaped + 1, []
    assert escaped == 0, "no callback exception came out of send or flush"
    assert failed == [] and len(pending) == 1000 and all(p.id and p.error is None for p in pending)
    assert sorted(heard) == list(range(1000)), "on_done once for every send, the raising ones too"
    assert pipe.callback_errors == len(raise_on), "each exception counted"
    assert sum("on_done raised" in r.getMessage() for r in caplog.records) == len(raise_on), "and logged"
    assert pipe.retried == 0, "no reply was thrown away (its request would have timed out and gone again)"
    got = drain(q, 1000)
    assert got == {p.id: b for p, b in zip(pending, bodies, strict=True)}, "each stored once, under its id"
    assert q.receive(max_messages=10, wait_time=0.5) == [], "nothing stored twice"
