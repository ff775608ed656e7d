"""Bad input from an application gets a specific error at once, and leaves
nothing behind: settings that are not whole numbers, dead-letter queues of
the other type, a request over the frame limit, receipts naming a partition
the queue does not have, wrong argument types, attributes the wire cannot
carry (real hosts, real Consul)."""

from __future__ import annotations

import json

import pytest

import zmqueue
from tests.conftest import QueueCluster, wait_for
from tests.helpers import consul_for
from zmqueue.client.models import AttributeValue
from zmqueue.controlplane import kvlayout as kv
from zmqueue.protocol import MAX_FRAME_BYTES, Command, Receipt


@pytest.mark.parametrize("settings", [{"visibility_timeout": 1.5}, {"partitions": 1.5},
                                      {"delay": 900.0}, {"max_message_bytes": 2500.5},
                                      {"max_receive_count": True}])
def test_a_setting_that_is_not_a_whole_number_is_refused_and_no_queue_is_made(
        qcluster: QueueCluster, settings: dict[str, object]) -> None:
    c = qcluster.client
    name = qcluster.queue_name()
    with pytest.raises(zmqueue.ConfigError, match="whole number"):
        c.create_queue(name, **settings)
    assert name not in c.list_queues()


def test_set_attributes_refuses_a_fraction_and_the_queue_keeps_working(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    with pytest.raises(zmqueue.ConfigError, match=r"visibility_timeout.*whole number"):
        q.set_attributes(visibility_timeout=1.5)
    q.send(b"still fine")
    [m] = q.receive(max_messages=1, wait_time=5)
    assert m.body == b"still fine"


def test_a_dead_letter_queue_of_the_other_type_is_refused(qcluster: QueueCluster) -> None:
    c = qcluster.client
    src = qcluster.queue_name("src")
    with pytest.raises(zmqueue.InvalidParameter, match="must be a standard queue"):
        c.create_queue(src, dead_letter_queue=qcluster.queue_name("dl") + ".fifo")
    assert src not in c.list_queues()
    std = c.create_queue(qcluster.queue_name("std"))
    fifo = c.create_queue(qcluster.queue_name("ff"), fifo=True)  # (a FIFO queue need not end in .fifo)
    with pytest.raises(zmqueue.InvalidParameter, match="is a standard queue; the dead-letter queue of FIFO"):
        c.create_queue(qcluster.queue_name("fsrc") + ".fifo", fifo=True, dead_letter_queue=std.name)
    with pytest.raises(zmqueue.InvalidParameter, match="is a FIFO queue; the dead-letter queue of standard"):
        c.create_queue(src, dead_letter_queue=fifo.name)
    q = c.create_queue(src)
    with pytest.raises(zmqueue.InvalidParameter, match="is a FIFO queue"):
        q.set_attributes(dead_letter_queue=fifo.name)
    assert q.config.dead_letter_queue is None
    # the .fifo name stays free for the FIFO queue it has to be
    c.create_queue(qcluster.queue_name("dl") + ".fifo", fifo=True)


def test_a_request_over_the_frame_limit_is_refused_before_it_is_sent(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), max_message_bytes=1 << 20)
    big = [b"x" * (1 << 20)] * ((MAX_FRAME_BYTES >> 20) + 1)
    with pytest.raises(zmqueue.InvalidParameter, match=r"over the \d+-byte limit of one request"):
        q.send_batch(big)
    breakers = qcluster.client.guards.breakers
    assert not [ep for ep, b in breakers.items() if b.failures], "no host was counted as failing"
    q.send(b"small")
    assert q.stats()["total"] == 1


@pytest.mark.parametrize(("attributes", "says"), [
    ({"n": 1 << 64}, "does not fit in 64 bits"),
    ({"n": -(1 << 63) - 1}, "does not fit in 64 bits"),
    ({"s": "a\udc80b"}, "cannot be sent as UTF-8"),
    ({"\udc80": "v"}, "cannot be sent as UTF-8"),
    ({"o": object()}, "must be a str, int, float or bytes, got object"),
    ({"t": True}, "must be a str, int, float or bytes, got bool"),
    ({"l": [1]}, "must be a str, int, float or bytes, got list"),
    ({7: "v"}, "attribute name 7 must be a str"),
    ([("k", "v")], "attributes must be a dict of names to values, got list"),
], ids=["int-too-big", "int-too-small", "value-surrogate", "name-surrogate", "object", "bool", "list",
        "int-name", "not-a-dict"])
def test_an_attribute_the_wire_cannot_carry_is_invalid_parameter_and_nothing_is_stored(
        qcluster: QueueCluster, attributes: dict[str, object], says: str) -> None:
    """(It was ProtocolError "cannot encode body" from the transport.) The
    edges of the 64-bit range are carried."""
    q = qcluster.client.create_queue(qcluster.queue_name())
    with pytest.raises(zmqueue.InvalidParameter, match=says):
        q.send(b"x", attributes=attributes)
    with pytest.raises(zmqueue.InvalidParameter, match=says):
        q.send_batch([zmqueue.OutgoingMessage(b"x", attributes), b"y"])  # type: ignore[arg-type]
    with q.pipeline(4) as pipe, pytest.raises(zmqueue.InvalidParameter, match=says):
        pipe.send(b"x", attributes=attributes)
    assert q.stats()["total"] == 0
    q.send(b"edges", attributes={"max": (1 << 64) - 1, "min": -(1 << 63)})
    [m] = q.receive(wait_time=5)
    assert m.attributes == {"max": (1 << 64) - 1, "min": -(1 << 63)}


def test_a_body_of_the_wrong_kind_is_invalid_parameter_naming_it_and_nothing_is_stored(
        qcluster: QueueCluster) -> None:
    """(An object() was ProtocolError "cannot encode body" from the transport;
    an int was refused by the host as "body must be bytes".) A batch is
    checked whole, across partitions, before any request is sent."""
    q = qcluster.client.create_queue(qcluster.queue_name(), partitions=2)
    for bad, kind in ((object(), "object"), (5, "int"), (None, "NoneType")):
        with pytest.raises(zmqueue.InvalidParameter, match=f"must be bytes or str .*got {kind}"):
            q.send(bad)
        with q.pipeline(4) as pipe, pytest.raises(zmqueue.InvalidParameter, match=f"got {kind}"):
            pipe.send(bad)
    with pytest.raises(zmqueue.InvalidParameter, match="message 3: the body must be bytes or str"):
        q.send_batch([b"a", "b", zmqueue.OutgoingMessage(b"c", {"k": "v"}), object()])
    fifo = qcluster.client.create_queue(qcluster.queue_name() + ".fifo", fifo=True, partitions=2)
    for kwargs in ({"group_id": 5}, {"group_id": "g", "dedup_id": 7}):
        with pytest.raises(zmqueue.InvalidParameter, match="_id must be a str of 1-128 characters, got int"):
            # (a group_id of another type was AttributeError from the partition hash)
            fifo.send(b"x", **kwargs)
    assert q.stats()["total"] == 0 and fifo.stats()["total"] == 0, "no partition got any refused message"
    ids = q.send_batch([b"bytes", "text", bytearray(b"array"), memoryview(b"view")])
    got = {m.id: m.body for m in drain_bodies(q, 4)}
    assert got == dict(zip(ids, [b"bytes", b"text", b"array", b"view"], strict=True))


@pytest.mark.parametrize("partitions", [1, 2])
def test_a_group_or_dedup_id_that_is_not_utf8_text_is_invalid_parameter_naming_it(
        qcluster: QueueCluster, partitions: int) -> None:
    """(A lone surrogate was a bare UnicodeEncodeError from the partition hash
    with 2 partitions, ProtocolError "cannot encode body" with 1.)"""
    fifo = qcluster.client.create_queue(qcluster.queue_name("sur") + ".fifo", fifo=True,
                                        partitions=partitions)
    standard = qcluster.client.create_queue(qcluster.queue_name("sur"), partitions=partitions)
    for q, kwargs, name in ((fifo, {"group_id": "\ud800"}, "group_id"),
                            (fifo, {"group_id": "g", "dedup_id": "a\udc80"}, "dedup_id"),
                            (standard, {"group_id": "\udc80"}, "group_id")):
        with pytest.raises(zmqueue.InvalidParameter, match=f"{name} .* cannot be sent as UTF-8") as err:
            q.send(b"x", **kwargs)
        assert err.value.details.get("field") == name
        with pytest.raises(zmqueue.InvalidParameter, match=f"message 1: {name} .* UTF-8"):
            q.send_batch([zmqueue.OutgoingMessage(b"ok", group_id="g"),
                          zmqueue.OutgoingMessage(b"x", group_id=kwargs["group_id"],
                                                  dedup_id=kwargs.get("dedup_id"))])
        with q.pipeline(4) as pipe, pytest.raises(zmqueue.InvalidParameter, match=f"{name} .* UTF-8"):
            pipe.send(b"x", **kwargs)
    assert fifo.stats()["total"] == 0 and standard.stats()["total"] == 0


def test_a_batch_over_partitions_names_the_bad_message_by_its_place_and_says_what_was_stored(
        qcluster: QueueCluster) -> None:
    """(The error named the message by its place in its partition's request,
    "message 1" for the batch's fourth, and did not say that the other
    partition's messages were stored; a bad delay, an oversized body or an
    empty FIFO group_id was refused by a host after other partitions' messages
    were stored, which ones depending on the round robin.)"""
    om = zmqueue.OutgoingMessage
    q = qcluster.client.create_queue(qcluster.queue_name("bidx"), partitions=2, max_message_bytes=1024)
    many: dict[str, AttributeValue] = {f"a{i}": "v" for i in range(11)}  # (the host refuses: too many)
    items = [om(b"m0"), om(b"m1"), om(b"m2"), om(b"m3", attributes=many), om(b"m4")]  # (0,2,4 | 1,3)
    with pytest.raises(zmqueue.InvalidParameter, match=r"^message 3: too many attributes") as err:
        q.send_batch(items)
    ids = err.value.details["ids"]
    assert err.value.details["index"] == 3 and len(ids) == 5 and ids[1] is None and ids[3] is None
    assert "were stored" in err.value.message
    stored = {m.id: m.body for m in drain_bodies(q, sum(1 for i in ids if i))}
    assert stored == {i: items[k].body for k, i in enumerate(ids) if i}, "details['ids'] are the stored ones"
    q.purge()
    fifo = qcluster.client.create_queue(qcluster.queue_name("bidx") + ".fifo", fifo=True, partitions=2)
    for queue, batch, words in (
            (q, [om(b"ok0"), om(b"bad1", delay=5000)], r"message 1: delay must be a whole number"),
            (q, [om(b"ok0"), om(b"ok1"), om(b"ok2"), om(b"x" * 2000)],
             r"message 3: 2000 bytes .* limit of 1024"),
            (q, [om(b"ok0"), om(b"ok1"), om(b"none", group_id=None), om(b"x", delay=True)],
             r"message 3: delay must be"),
            (fifo, [om(b"a", group_id="g"), om(b"b", group_id="h"), om(b"c", group_id="i"),
                    om(b"d", group_id="")],
             r"message 3: group_id must be 1-128 characters"),
            (fifo, [om(b"a", group_id="g"), om(b"b")], r"message 1: FIFO queues need a group_id")):
        for _ in range(2):  # (whichever partition the round robin starts at)
            with pytest.raises(zmqueue.InvalidParameter, match=words) as err:
                queue.send_batch(batch)
            assert "ids" not in err.value.details
    assert q.stats()["total"] == 0 and fifo.stats()["total"] == 0, "checked before any request was sent"


def drain_bodies(q: zmqueue.Queue, n: int) -> list[zmqueue.Message]:
    out: list[zmqueue.Message] = []
    for _ in range(20):
        out += q.receive(max_messages=10, wait_time=1)
        if len(out) >= n:
            break
    return out


def test_receipts_and_arguments_of_the_wrong_kind_are_refused_at_once(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    forged = Receipt(q.name, 5, "fifo", 1, 1, 1).encode()
    with pytest.raises(zmqueue.InvalidReceipt, match="names partition 5, but queue"):
        q.delete(forged)  # (was: Unavailable, after the whole request timeout)
    q.send(b"m")
    [m] = q.receive(max_messages=1, wait_time=5)
    for bad in (1.5, None, "3"):
        with pytest.raises(zmqueue.InvalidParameter, match="visibility timeout"):
            q.change_visibility(m, bad)
    for kwargs in ({"wait_time": "1"}, {"wait_time": None}, {"max_messages": True}):
        with pytest.raises(zmqueue.InvalidParameter):
            q.receive(**kwargs)
    with pytest.raises(zmqueue.InvalidParameter, match="list of messages"):
        q.send_batch("abc")
    with pytest.raises(zmqueue.InvalidParameter, match="UTF-8"):
        q.send("\ud800")
    with pytest.raises(zmqueue.InvalidParameter, match="handler"):
        q.subscribe(None)
    with pytest.raises(zmqueue.InvalidParameter):
        q.pipeline(window=None)
    with pytest.raises(zmqueue.ConfigError, match="invalid queue name"):
        qcluster.client.create_queue(qcluster.queue_name() + "\n")
    q.delete(m)
    assert q.stats()["total"] == 0, "nothing was sent by the refused calls"


def _nested(depth: int) -> list[object]:
    v: list[object] = []
    for _ in range(depth - 1):
        v = [v]
    return v


@pytest.mark.parametrize(("config", "field", "says"), [
    ({"note": b"\x00\x01"}, "note", "a bytes cannot be"),
    ({"note": {"k": [1, {"deep": b"x"}]}}, "note", "a bytes cannot be"),
    ({"note": float("nan")}, "note", "cannot be stored as JSON"),
    ({"note": {"k": {7: "v"}}}, "note", "has a key that is not a string"),
    ({5: 1}, "config", "key 5 is not a string"),
    ({"note": _nested(900)}, "note", "over 16 deep"),
    ({"note": "x" * 600_000}, "note", r"over the 65536-byte limit; its largest unknown key is 'note'"),
    ({"note": ["x" * 1000] * 70}, "note", "over the 65536-byte limit"),
], ids=["bytes", "nested-bytes", "nan", "nested-int-key", "int-key", "deep", "600KB", "70KB"])
def test_an_unknown_config_key_kv_cannot_store_is_invalid_parameter_naming_it_and_no_queue_is_made(
        qcluster: QueueCluster, config: dict[object, object], field: str, says: str) -> None:
    """(Each was INTERNAL from the admin worker, unlogged and uncounted: json
    TypeError, '<' between str and int, RecursionError, Consul's 413.)"""
    c = qcluster.client
    name = qcluster.queue_name("extra")
    ep = c.hosts()[0].client_endpoint
    with pytest.raises(zmqueue.InvalidParameter, match=says) as err:
        c.request(ep, Command.CREATE_QUEUE, {"config": {"name": name, "dead_letter_queue": name + "-dl",
                                                        **config}})
    assert err.value.details.get("field") == field
    assert not c.list_queues(name), "neither the queue nor its DLQ was made"
    status = c.request(ep, Command.STATUS, None)
    assert status["counters"].get("internal_errors", 0) == 0


def test_unknown_config_keys_within_the_limits_are_kept(qcluster: QueueCluster) -> None:
    c = qcluster.client
    name = qcluster.queue_name("extra")
    note = {"owner": "team-a", "tags": [1, 2.5, None, True], "deep": _nested(15), "text": "x" * 60_000}
    reply = c.request(c.hosts()[0].client_endpoint, Command.CREATE_QUEUE, {"config": {"name": name, **note}})
    assert reply["queue"]["config"]["name"] == name
    with pytest.raises(zmqueue.InvalidParameter, match="names of settings to change must be strings"):
        c.request(c.hosts()[0].client_endpoint, Command.SET_QUEUE_ATTRIBUTES,
                  {"name": name, "changes": {5: 1, "x": 2}})  # (sorting them was '<' TypeError: INTERNAL)
    c.get_queue(name).set_attributes(visibility_timeout=7)  # rewritten with its unknown keys
    _, item = consul_for(qcluster.factory.agent).kv.get(kv.queue_config_key(name))
    stored = json.loads(item["Value"])
    assert stored["visibility_timeout_s"] == 7 and {k: stored[k] for k in note} == note


def test_get_queue_refuses_a_consistent_flag_that_is_not_a_bool(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    for bad in ("yes", 1, None):
        with pytest.raises(zmqueue.InvalidParameter, match="consistent must be true or false"):
            qcluster.client.any_host(Command.GET_QUEUE, {"name": q.name, "consistent": bad})
    assert qcluster.client.get_queue(q.name, consistent=True).name == q.name


@pytest.mark.parametrize("value", [b"yes", "no", [], {"x": [1]}, 1, None])
def test_content_based_dedup_that_is_not_a_bool_is_refused_on_create_and_set(
        qcluster: QueueCluster, value: object) -> None:
    """(Bytes were INTERNAL from the admin worker's JSON dump; the rest were
    stored as sent, and "no", truthy, turned deduplication on.)"""
    c = qcluster.client
    name = qcluster.queue_name("cbd")
    ep = c.hosts()[0].client_endpoint
    with pytest.raises(zmqueue.InvalidParameter, match=r"content_based_dedup.*must be true or false") as err:
        c.request(ep, Command.CREATE_QUEUE, {"config": {"name": name, "content_based_dedup": value}})
    assert err.value.details.get("field") == "content_based_dedup"
    assert not c.list_queues(name)
    q = c.create_queue(name)
    with pytest.raises(zmqueue.InvalidParameter, match=r"content_based_dedup.*must be true or false"):
        c.request(ep, Command.SET_QUEUE_ATTRIBUTES, {"name": name, "changes": {"content_based_dedup": value}})
    assert c.get_queue(name, consistent=True).config.content_based_dedup is False
    assert q.send(b"same") != q.send(b"same")  # (no deduplication: two messages)
    assert c.request(ep, Command.STATUS, None)["counters"].get("internal_errors", 0) == 0


def test_errors_echo_at_most_a_bounded_part_of_what_was_sent(qcluster: QueueCluster) -> None:
    """(An 8 MB queue name, quorum or setting name came back whole in an 8 MB error reply.)"""
    c = qcluster.client
    ep = c.hosts()[0].client_endpoint
    huge = "x" * 1_000_000
    q = c.create_queue(qcluster.queue_name("echo"))
    for command, body in ((Command.CREATE_QUEUE, {"config": {"name": huge}}),
                          (Command.CREATE_QUEUE, {"config": {"name": q.name + "2", "sync_quorum": huge}}),
                          (Command.SET_QUEUE_ATTRIBUTES, {"name": q.name, "changes": {huge: 1}})):
        with pytest.raises(zmqueue.InvalidParameter) as err:
            c.request(ep, command, body)
        assert 20 < len(str(err.value)) < 1000, (command, len(str(err.value)))


def test_a_refused_message_of_a_batch_is_named_and_the_errors_say_what_to_do(qcluster: QueueCluster) -> None:
    """(Too many attributes, a long attribute name and a message too large did
    not say which message of a batch; a fractional delay did not say that it
    must be whole; a full queue did not say what to do.)"""
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("named"), max_message_bytes=1024, max_messages=3)
    ok = zmqueue.OutgoingMessage(b"ok")
    for bad, words in (
            (zmqueue.OutgoingMessage(b"x", attributes={f"a{i}": "v" for i in range(11)}),
             r"message 2: too many attributes: 11"),
            (zmqueue.OutgoingMessage(b"x", attributes={"n" * 300: "v"}),
             r"message 2: attribute name .* must be"),
            (zmqueue.OutgoingMessage(b"x" * 2000),
             r"message 2: 2000 bytes .* exceed the queue's limit of 1024")):
        with pytest.raises(zmqueue.InvalidParameter, match=words):
            q.send_batch([ok, ok, bad])
    with pytest.raises(zmqueue.InvalidParameter,
                       match=r"message 0: delay must be a whole number .* got 1\.5"):
        c.request(q.routes.for_send(0)[0], Command.SEND,  # (the client library refuses it before sending)
                  {"q": q.name, "p": 0, "m": [[b"x", None, 1.5, None, None]]})
    assert q.receive(max_messages=10) == [], "nothing of a refused batch was stored"
    q.send_batch([ok] * 3)
    with pytest.raises(zmqueue.QueueLimitReached,
                       match=r"receive and delete messages, or raise .*max_messages"):
        q.send(b"one too many")


def test_a_receipt_or_origin_naming_a_stream_the_partition_does_not_have_is_refused_as_such(
        qcluster: QueueCluster) -> None:
    """(Every host answered NOT_LEADER naming another, which named the first
    back: the client went to and fro until its timeout. Found by QA in the
    forty-sixth session.)"""
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("nostream"), replication_factor=2)  # both hosts keep it
    q.send(b"x")
    [m] = q.receive(max_messages=1, wait_time=5)
    r = Receipt.decode(m.receipt)
    bogus = Receipt(r.queue, r.partition, "nosuchhost", r.seq, r.receive_count, r.epoch,
                    r.incarnation).encode()
    hosts = {h.node: h.client_endpoint for h in c.hosts(True)}
    assert r.origin in hosts and len(hosts) == 2

    def refused(endpoint: str, command: Command, body: dict[str, object]) -> zmqueue.ZmqueueError:
        try:
            c.request(endpoint, command, body)
        except zmqueue.ZmqueueError as exc:
            return exc
        raise AssertionError(f"{command.name} {body} was served by {endpoint}")

    def refused_delete(endpoint: str) -> zmqueue.ZmqueueError | None:
        err = refused(endpoint, Command.DELETE, {"q": q.name, "r": [bogus]})
        return None if isinstance(err, zmqueue.NotLeader) else err  # (its metadata a moment behind)

    for endpoint in hosts.values():  # every host: none redirects to another
        err = wait_for(lambda: refused_delete(endpoint), 10, "a refusal")  # noqa: B023
        assert isinstance(err, zmqueue.InvalidReceipt), repr(err)
        assert f"partition {r.partition} has no stream 'nosuchhost'" in str(err)
        assert r.origin in str(err)  # (its streams are listed)
        for command in (Command.PURGE_QUEUE, Command.QUEUE_STATS):
            err = refused(endpoint, command, {"q": q.name, "o": "nosuchhost"})
            assert isinstance(err, zmqueue.InvalidParameter) and err.details["field"] == "origin", repr(err)
    with pytest.raises(zmqueue.InvalidReceipt, match="no stream 'nosuchhost'"):
        q.delete(bogus)
    # a stream the partition has is served as before (or NOT_LEADER from a host not writing it)
    stats = c.request(hosts[r.origin], Command.QUEUE_STATS, {"q": q.name, "o": r.origin})
    assert stats["in_flight"] == 1 and stats["node"] == r.origin
    other = next(ep for node, ep in hosts.items() if node != r.origin)
    with pytest.raises(zmqueue.NotLeader):
        c.request(other, Command.QUEUE_STATS, {"q": q.name, "o": r.origin})
    q.delete(m.receipt)


@pytest.mark.parametrize("body", [{}, {"config": [1]}, {"config": "x"}, {"config": None}])
def test_a_create_queue_without_a_config_map_says_what_config_must_be(
        qcluster: QueueCluster, body: dict[str, object]) -> None:
    """(It answered "QueueConfig.__init__() missing 1 required positional
    argument: 'name'". Found by QA in the forty-sixth session.)"""
    c = qcluster.client
    endpoint = c.hosts(True)[0].client_endpoint
    with pytest.raises(zmqueue.InvalidParameter) as exc:
        c.request(endpoint, Command.CREATE_QUEUE, body)
    assert str(exc.value) == "config must be a map of queue settings (see PROTOCOL.md CREATE_QUEUE)"
    assert exc.value.details["field"] == "config"
    with pytest.raises(zmqueue.InvalidParameter) as exc:  # a map without the queue's name
        c.request(endpoint, Command.CREATE_QUEUE, {"config": {"fifo": False}})
    assert "needs the queue's name" in str(exc.value) and exc.value.details["field"] == "name"
    assert "__init__" not in str(exc.value)
