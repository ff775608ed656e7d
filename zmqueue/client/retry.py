"""How long a client keeps trying: one request's retry budget and its back-off.

Every retry loop of the client (a queue request, an administrative request to
any host, waiting for a partition's hosts to be known) counts its attempts
and its deadline here, so they all give up by the same rule: at least a
number of attempts, and more while the request timeout has not passed.
"""

from __future__ import annotations

import time

from zmqueue.errors import RequestTimeout, ZmqueueError


def may_be_stored(exc: ZmqueueError) -> bool:
    """Whether a failed SEND attempt may have stored its messages: the host
    said so (``stored=True``: its replicas' acks timed out, it keeps the
    records), or no reply came over a live connection (``RequestTimeout``).
    Not a lost connection (``ConnectionLost``: the host died or was never
    reached; what a dead writer had replicated is found by the retry's
    request id) and not the other refusals."""
    return exc.details.get("stored") is True or type(exc) is RequestTimeout


def reported(last: ZmqueueError, maybe_stored: ZmqueueError | None) -> ZmqueueError:
    """The error a failed SEND raises after its attempts: the last one's,
    unless that one says its attempt stored nothing (``stored=False``: a
    writer short of its quorum refused it at once) while an earlier attempt
    may have stored the messages (``maybe_stored``: its replicas' acks timed
    out on a writer that keeps the records, or no reply came). Then the
    earlier one, which says they may still be delivered: "nothing was
    stored" would be true of the last attempt only, and a caller who read it
    and sent again would store the messages twice."""
    if maybe_stored is not None and last.details.get("stored") is False:
        return maybe_stored
    return last


FOLLOWS_FREE = 2
"""How many NOT_LEADER hints naming another host one call follows at once;
later ones wait the back-off first (:meth:`RetryBudget.follow`)."""


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt``: 50 ms doubling, capped at 0.5 s."""
    return min(0.5, 0.05 * float(2 ** min(attempt, 4)))


class RetryBudget:
    """The attempts of one request: :meth:`again` before each, :meth:`pause`
    after a failure that is worth waiting on. Not thread safe (one per call)."""

    def __init__(self, tries: int, timeout_s: float) -> None:
        self.tries = tries
        """Attempts made whatever the time (``retries`` + 1 or + 2)."""
        self.give_up_at = time.monotonic() + timeout_s
        self.attempt = -1
        """The current attempt, from 0."""
        self.follows = 0
        """NOT_LEADER hints followed so far (:meth:`follow`)."""

    def again(self) -> bool:
        """Start another attempt if the budget allows: the first ``tries``
        always, more until the deadline."""
        self.attempt += 1
        return self.attempt < self.tries or not self.expired()

    def expired(self) -> bool:
        return time.monotonic() >= self.give_up_at

    def pause(self) -> None:
        """Back off before the next attempt."""
        time.sleep(backoff(self.attempt))

    def follow(self) -> None:
        """A NOT_LEADER named another host, tried next: at once the first
        :data:`FOLLOWS_FREE` times, after the back-off from then on. Two hosts
        that each name the other (neither writes the stream, each believes the
        other does) used to bounce a request between them in a tight loop until
        the deadline: tens of thousands of requests for one call."""
        self.follows += 1
        if self.follows > FOLLOWS_FREE:
            self.pause()


__all__ = ["FOLLOWS_FREE", "RetryBudget", "backoff", "may_be_stored", "reported"]
