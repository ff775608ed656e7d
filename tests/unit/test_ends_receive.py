"""Which error replies end a receive, in the sweep and in the long poll alike
(``zmqueue.client.receiving.ends_receive``): the ones no retry within the wait
can change. Pure logic."""

from __future__ import annotations

from zmqueue.client.receiving import ends_receive
from zmqueue.errors import NotLeader, QueueNotFound, RequestTimeout, Unavailable


def test_a_deleted_queue_and_a_missing_key_end_a_receive_and_moment_refusals_do_not() -> None:
    assert ends_receive(QueueNotFound("queue 'q' was deleted"))
    assert ends_receive(Unavailable("no key for 'q'", queue="q", missing_key=True))
    assert not ends_receive(Unavailable("only 1 of 3 replicas acknowledged"))
    assert not ends_receive(NotLeader("this host no longer keeps queue 'q' partition 0", leader=None,
                                      endpoint=None))
    assert not ends_receive(RequestTimeout("no reply"))
