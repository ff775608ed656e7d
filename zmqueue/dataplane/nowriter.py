"""What a host answers for a stream it does not write: whom to ask instead,
or why nobody writes it now.

A client retries NOT_LEADER and UNAVAILABLE answers until its request
timeout and then raises the last one, so the last answer must say what is
wrong. Three cases, checked in this order:

- this host lost Consul longer ago than the outage grace: every writer of a
  total outage has stopped and no election can run, so the writers this host
  last knew of are no hint: UNAVAILABLE, saying so and to restore Consul (a
  client used to be sent between hosts that each named the other);
- nobody writes the stream, and the election waits for its voters (a
  majority of a FIFO queue's replicas down): NOT_LEADER naming none, with
  what the election waits for, as the host's log says it;
- otherwise NOT_LEADER naming the writer this host knows, if any.
"""

from __future__ import annotations

from dataclasses import dataclass

from zmqueue.errors import NotLeader, Unavailable


@dataclass(frozen=True)
class ConsulLost:
    """Consul has not answered the host since ``since`` (time.monotonic());
    its writers stop ``grace_s`` into the outage."""

    since: float
    grace_s: float


def no_writer(queue: str, p: int, origin: str, writer: str | None, endpoint: str | None, *,
              lost: ConsulLost | None = None, waiting: str | None = None,
              now: float = 0.0) -> NotLeader | Unavailable:
    """The refusal of a request for stream ``(queue, p, origin)`` on a host
    that does not write it (module doc); ``writer``/``endpoint``: the writer
    this host knows (not itself), ``waiting``: what the stream's election
    waits for, as this host last saw it (None: nothing known)."""
    name = f"{queue!r} partition {p} ({origin})"
    if lost is not None and now - lost.since >= lost.grace_s:
        return Unavailable(
            f"{name}: this host lost Consul {now - lost.since:.0f} s ago; writers stop after "
            f"{lost.grace_s:.0f} s without it and none can be elected until it is back: restore Consul "
            "(OPERATOR_GUIDE 'Failures of Consul itself'). Nothing was stored",
            stored=False, consul_lost_s=round(now - lost.since))
    if writer is None and waiting:
        return NotLeader(f"{name} has no writer: {waiting}", leader=None, endpoint=None)
    return NotLeader(f"{name} is written by {writer or 'no host yet (election in progress)'}; retry there",
                     leader=writer, endpoint=endpoint)
