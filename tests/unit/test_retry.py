"""The client's retry budget: how many attempts, and for how long."""

from __future__ import annotations

import time

from zmqueue.client.retry import RetryBudget, backoff, may_be_stored, reported
from zmqueue.errors import ConnectionLost, NotLeader, RequestTimeout, Unavailable


def attempts(budget: RetryBudget, cap: int = 10_000) -> int:
    n = 0
    while n < cap and budget.again():
        n += 1
    return n


def test_the_first_tries_are_made_even_after_the_deadline() -> None:
    assert attempts(RetryBudget(3, 0.0)) == 3
    assert attempts(RetryBudget(0, 0.0)) == 0


def test_more_attempts_until_the_deadline() -> None:
    assert attempts(RetryBudget(2, 60.0), cap=50) == 50  # the deadline is far: not given up


def test_the_budget_runs_out_at_its_deadline() -> None:
    budget = RetryBudget(1, 0.2)
    started = time.monotonic()
    deadline = started + 5.0
    while budget.again() and time.monotonic() < deadline:
        pass
    assert budget.expired()
    assert 0.2 <= time.monotonic() - started < 5.0
    assert not budget.again()


def test_backoff_doubles_from_50_ms_and_is_capped_at_half_a_second() -> None:
    assert [backoff(a) for a in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff(1000) == 0.5


def test_pause_waits_the_current_attempts_backoff() -> None:
    budget = RetryBudget(5, 10.0)
    budget.again()
    budget.again()  # attempt 1: 0.1 s
    started = time.monotonic()
    budget.pause()
    assert 0.1 <= time.monotonic() - started < 2.0


def test_a_send_that_may_have_been_stored_is_not_reported_as_stored_nowhere() -> None:
    """Attempt 1's acks timed out on a writer that keeps the records; attempt 2
    was refused at once, storing nothing: the caller is told the first (its
    messages may still be delivered), not the second."""
    stored = Unavailable("only 1 of 3 replicas acknowledged within 5 s ...", stored=True)
    refused = Unavailable("replicas ['b', 'c'] ... are down ... Nothing was stored", stored=False)
    no_reply = RequestTimeout("SEND to tcp://127.0.0.1:1 got no reply within 5000 ms")
    assert reported(refused, stored) is stored
    assert reported(refused, no_reply) is no_reply  # no reply: it may have been stored too
    assert reported(refused, None) is refused  # every attempt refused at once: nothing stored
    assert reported(no_reply, stored) is no_reply  # the last one is as uncertain: it says so
    # which attempts count as maybe stored
    lost = ConnectionLost("SEND to tcp://127.0.0.1:1 got no reply: nothing accepts connections there")
    assert may_be_stored(stored) and may_be_stored(no_reply)
    assert not may_be_stored(refused) and not may_be_stored(lost)
    assert not may_be_stored(NotLeader("written by b; retry there", leader="b"))
