"""Whether the Consul KV state a host reads moves forward: pure logic.

A Consul agent that lost its state (a dev agent restarted, a server restored
from an old snapshot) answers with a lower KV index than the host has seen.
Until the index passes the highest one seen again, the host keeps every queue
it knows (nothing is removed on the word of a state that went back in time).

The index also goes back for a moment in normal operation: deleting the key
that carried the highest index (every ``DELETE_QUEUE`` deletes a queue's
keys) lowers the index of the listing until the next write. So an episode
is a WARNING only once it has lasted :data:`WARN_AFTER_S` (seen at a
snapshot read then), logged once, and once more when it ends; a brief one
is logged at DEBUG (it was a WARNING each time: ~100 per host in a session
of queue deletions).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

WARN_AFTER_S = 10.0
"""How long the index must stay behind before the episode is a WARNING."""


@dataclass
class KvIndexWatch:
    highest: int = 0
    """The highest KV index seen."""
    went_back_to: int | None = None
    """While an episode lasts: the index it went back to first."""
    since: float = 0.0
    """When the episode started (monotonic s)."""
    warned: bool = False
    """Whether the episode was logged as a WARNING."""

    def observe(self, index: int, now: float | None = None) -> tuple[bool, str | None, int]:
        """``(forward, note, level)`` for a snapshot read at ``index`` (at
        monotonic time ``now``): forward when it is not below the highest index
        seen; a note to log at ``level`` when an episode starts, turns long, or
        ends, None otherwise."""
        now = time.monotonic() if now is None else now
        if index >= self.highest:
            note, level = None, logging.DEBUG
            if self.went_back_to is not None:
                note = (f"Consul KV index is at {index}, past {self.highest} again (it had gone back to "
                        f"{self.went_back_to} for {now - self.since:.1f} s): queues gone from KV are "
                        "handled again")
                level = logging.WARNING if self.warned else logging.DEBUG
                self.went_back_to, self.warned = None, False
            self.highest = index
            return True, note, level
        if self.went_back_to is None:
            self.went_back_to, self.since = index, now
            return False, (f"Consul KV index went back from {self.highest} to {index} (a deletion of the "
                           "key with the highest index, or the agent lost its state): keeping every known "
                           f"queue until the index passes {self.highest}"), logging.DEBUG
        if not self.warned and now - self.since >= WARN_AFTER_S:
            self.warned = True
            return False, (f"Consul KV index went back from {self.highest} to {self.went_back_to} "
                           f"{now - self.since:.0f} s ago and is at {index} (agent lost its state?): keeping "
                           f"every known queue; nothing is removed until the state moves forward past "
                           f"{self.highest} (logged once, and once when it has)"), logging.WARNING
        return False, None, logging.DEBUG
