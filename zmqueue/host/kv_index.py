"""Whether the Consul KV state a host reads moves forward: pure logic.

A Consul agent that lost its state (a dev agent restarted, a server restored
from an old snapshot) answers with a lower KV index than the host has seen.
Until the index passes the highest one seen again, the host keeps every queue
it knows (nothing is removed on the word of a state that went back in time).
Such an episode is logged once when it starts and once when it ends, not on
every snapshot read during it (a watcher wakes at every position write).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KvIndexWatch:
    highest: int = 0
    """The highest KV index seen."""
    went_back_to: int | None = None
    """While an episode lasts: the index it went back to first."""

    def observe(self, index: int) -> tuple[bool, str | None]:
        """``(forward, note)`` for a snapshot read at ``index``: forward when
        it is not below the highest index seen; a note to log when an episode
        starts or ends, None otherwise."""
        if index >= self.highest:
            note = None
            if self.went_back_to is not None:
                note = (f"Consul KV index is at {index}, past {self.highest} again (it had gone back to "
                        f"{self.went_back_to}): queues gone from KV are handled again")
                self.went_back_to = None
            self.highest = index
            return True, note
        if self.went_back_to is not None:
            return False, None
        self.went_back_to = index
        return False, (f"Consul KV index went back from {self.highest} to {index} (agent lost its "
                       "state?): keeping every known queue; nothing is removed until the state moves "
                       f"forward past {self.highest} (logged once, and once when it has)")
