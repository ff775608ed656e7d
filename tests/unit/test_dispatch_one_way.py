"""The dispatcher's one-way messages and early replies (pure logic, no sockets)."""

from __future__ import annotations

from typing import Any

from zmqueue.dataplane.dispatch import DEFERRED, Dispatcher, Request
from zmqueue.errors import InvalidParameter
from zmqueue.protocol import Command, decode, encode_request


def _dispatcher(one_way: Any) -> tuple[Dispatcher, list[Any], list[Request]]:
    d = Dispatcher()
    noted: list[Any] = []
    served: list[Request] = []

    def handler(req: Request) -> Any:
        served.append(req)
        return {"served": True}

    def quick(body: Any, user: str | None) -> bool:
        noted.append(body)
        return bool(one_way(body))

    d.register(Command.POSITION, handler, sockets=("peer",))
    d.one_way[Command.POSITION] = quick
    return d, noted, served


def test_a_one_way_message_is_handled_without_a_request_or_a_reply() -> None:
    d, noted, served = _dispatcher(lambda body: body.get("ack") is False)
    d.handle("peer", [b"h2", encode_request(Command.POSITION, 7, {"seq": 5, "ack": False})])
    assert noted == [{"seq": 5, "ack": False}] and served == []
    assert d.outbox.take() == []


def test_a_message_the_one_way_handler_declines_is_served_as_a_request() -> None:
    d, noted, served = _dispatcher(lambda body: body.get("ack") is False)
    d.handle("peer", [b"h2", encode_request(Command.POSITION, 8, {"seq": 5})])
    assert len(noted) == 1 and len(served) == 1
    (sock, identity, payload), = d.outbox.take()
    assert (sock, identity) == ("peer", b"h2") and decode(payload).body == {"served": True}


def test_a_one_way_message_its_handler_refuses_is_answered_with_the_error() -> None:
    def bad(body: Any) -> bool:
        raise InvalidParameter("bad stream id", field="s")

    d, _, served = _dispatcher(bad)
    d.handle("peer", [b"h2", encode_request(Command.POSITION, 9, {"s": 1, "ack": False})])
    assert served == []  # (handled once: before, it was served again as a request, which refused it again)
    (sock, identity, payload), = d.outbox.take()
    frame = decode(payload)
    assert (sock, identity, frame.request_id, frame.is_error) == ("peer", b"h2", 9, True)
    assert frame.body["details"] == {"field": "s"}


def test_one_way_handling_is_not_offered_on_a_socket_the_command_is_not_served_on() -> None:
    d, noted, served = _dispatcher(lambda body: True)
    d.handle("client", [b"c1", encode_request(Command.POSITION, 10, {"ack": False})])
    assert noted == [] and served == []
    (_, _, payload), = d.outbox.take()
    assert decode(payload).is_error  # UnknownCommand: POSITION is host-to-host only


def test_committed_replies_go_out_early_and_before_the_rest() -> None:
    d = Dispatcher()
    waiting: list[Request] = []

    def deferred(req: Request) -> Any:
        waiting.append(req)
        return DEFERRED

    d.register(Command.SEND, deferred)
    d.register(Command.RECEIVE, lambda req: {"m": []})
    d.handle("client", [b"a", encode_request(Command.SEND, 1, {"q": "x"})])
    d.handle("client", [b"b", encode_request(Command.RECEIVE, 2, {"q": "x"})])
    waiting[0].prepare({"ids": ["0" * 32]})
    waiting[0].committed = True
    waiting[0].reply({"ids": ["0" * 32]})
    assert [i for _, i, _ in d.outbox.early] == [b"a"]
    assert [i for _, i, _ in d.outbox.take()] == [b"a", b"b"]
    assert d.outbox.early == [] and d.outbox.items == []


def test_the_one_way_handler_gets_the_connections_authenticated_identity() -> None:
    users: list[str | None] = []
    d = Dispatcher()
    d.register(Command.POSITION, lambda req: {}, sockets=("peer",))

    def quick(body: Any, user: str | None) -> bool:
        users.append(user)
        return True

    d.one_way[Command.POSITION] = quick
    d.handle("peer", [b"r", encode_request(Command.POSITION, 1, {"ack": False})], user="h3")
    d.handle("peer", [b"r", encode_request(Command.POSITION, 2, {"ack": False})])
    assert users == ["h3", None]
