"""Advisory warning checks on a host's Consul service.

A host reports conditions an operator should see in the Consul UI but that
say nothing about whether the host can serve: bad values in Consul KV
(``kv:`` checks, :mod:`zmqueue.controlplane.kvhealth`) and a data disk below
the host's reserve (``disk:`` checks). Each is a TTL check in state
**warning** with the details as its output, registered while the condition
holds and removed once it is gone, so a clean host shows just its health
checks. Discovery keeps these checks out of a host's health
(:data:`zmqueue.controlplane.discovery.ADVISORY_CHECK_PREFIXES`), so clients
and the control plane go on routing to the host.
"""

from __future__ import annotations

import logging
import time

import consul

from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.errors import ConsulUnavailable

log = logging.getLogger(__name__)

NOTES_CHARS_MAX = 2000
REPORT_EVERY_S = 15.0
"""A standing warning is re-sent this often (Consul may have forgotten it)."""


class WarningCheck:
    """One advisory check (``check_id`` on ``service_id``). Call
    :meth:`report` from one thread only (it uses ``client``)."""

    def __init__(self, client: ConsulClient, service_id: str, check_id: str, name: str,
                 description: str) -> None:
        self.client = client
        self.service_id = service_id
        self.check_id = check_id
        self.name = name
        self.description = description
        self._last: str | None = None
        self._sent_at = 0.0

    def report(self, notes: str) -> bool:
        """Warn with ``notes`` (truncated), or remove the check when empty.
        Sends nothing when unchanged, except a standing warning every
        ``REPORT_EVERY_S``. True when the notes changed (and were sent)."""
        notes = notes[:NOTES_CHARS_MAX]
        now = time.monotonic()
        if notes == (self._last or "") and (not notes or now - self._sent_at < REPORT_EVERY_S):
            return False
        try:
            if notes and self._last and notes != self._last:
                # new notes on a standing warning: a check whose status stays the same reaches
                # the catalog (the UI, other agents) only at the agent's check_update_interval
                # (5 min by default); a check registered anew is synced at once
                self.client.call(lambda c: c.agent.check.deregister(self.check_id))
            if notes:
                self._warn(notes)
            elif self._last:
                self.client.call(lambda c: c.agent.check.deregister(self.check_id))
        except (consul.ConsulException, ConsulUnavailable) as exc:
            log.warning("could not update check %s: %s", self.check_id, exc)
            return False
        changed = notes != (self._last or "")
        self._last, self._sent_at = notes, now
        return changed

    def _warn(self, notes: str) -> None:
        def put(c: consul.Consul) -> None:
            c.agent.check.register(self.name, check=consul.Check.ttl("24h"), check_id=self.check_id,
                                   service_id=self.service_id, notes=self.description)
            c.agent.check.ttl_warn(self.check_id, notes)

        self.client.call(put)
