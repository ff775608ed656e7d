"""The dead-letter mover's retry warnings: once a minute per stream and kind, not once a retry."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from zmqueue.dataplane.deadletters import DeadLetterMover

KEY = ("orders", 0, "node-a")


def mover() -> DeadLetterMover:
    svc: Any = None  # _warn and _moved touch no service state
    return DeadLetterMover(svc)


def test_a_retry_a_second_logs_once_a_minute_and_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    m = mover()
    caplog.set_level(logging.WARNING, logger="zmqueue.dataplane.deadletters")
    for second in range(125):  # the mover retries every second
        m._warn(KEY, "open", second * 1000, "cannot move %d dead letters of %s", 3, "orders")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "cannot move 3 dead letters of orders",
        "cannot move 3 dead letters of orders (59 like it in the last minute not logged)",
        "cannot move 3 dead letters of orders (59 like it in the last minute not logged)",
    ]


def test_kinds_and_streams_are_separate_and_a_move_makes_the_next_failure_news(
        caplog: pytest.LogCaptureFixture) -> None:
    m = mover()
    caplog.set_level(logging.WARNING, logger="zmqueue.dataplane.deadletters")
    other = ("orders", 1, "node-a")
    m._warn(KEY, "open", 0, "a")
    m._warn(KEY, "full", 10, "b")
    m._warn(other, "open", 20, "c")
    m._warn(KEY, "open", 30, "d")  # held back
    assert [r.getMessage() for r in caplog.records] == ["a", "b", "c"]
    m._moved(KEY, "orders", 2)
    assert m.moved == {"orders": 2}
    m._warn(KEY, "open", 40, "e")  # after a move: logged at once, nothing held back carried over
    m._warn(other, "open", 50, "f")  # the other stream is still within its minute
    assert [r.getMessage() for r in caplog.records] == ["a", "b", "c", "e"]
