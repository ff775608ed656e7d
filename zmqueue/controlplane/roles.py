"""A host's Consul session and the manager locks it holds with it.

The session is tied to the host's own checks (``serfHealth``, the TTL
heartbeat ``service:zmqueue-<node>`` and the HTTP probe
``http:zmqueue-<node>``) with behavior ``release`` and no lock delay: the
moment either check goes critical (the host died or hung), Consul invalidates
the session and frees every lock it held, and another host takes the role.
The session's own TTL (10 s, renewed every few seconds) only matters if the
host stops renewing while its checks still pass.

Creating a session fails while one of its checks is critical (right after
start-up the HTTP probe has not run yet), so :meth:`Session.ensure` simply
returns ``None`` until it succeeds.
"""

from __future__ import annotations

import logging
import time

import consul

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import AgentHome, ConsulClient, create_session

log = logging.getLogger(__name__)

SESSION_TTL_S = 10
RENEW_EVERY_S = 3.0


def session_checks(service_id: str) -> list[str]:
    return ["serfHealth", f"service:{service_id}", f"http:{service_id}"]


class Session:
    """One Consul session, created on demand and renewed; one thread only."""

    def __init__(self, client: ConsulClient, node: str, service_id: str,
                 home: AgentHome | None = None) -> None:
        """``home``: the agent holding the host's checks, where the session is
        created (see :class:`AgentHome`)."""
        self.client = client
        self.home = home
        self.node = node
        self.service_id = service_id
        self.id: str | None = None
        self._renewed_at = 0.0

    def ensure(self) -> str | None:
        """The live session id, creating or renewing as needed; ``None`` while
        Consul refuses (a check is not passing yet)."""
        now = time.monotonic()
        if self.id is not None and now - self._renewed_at < RENEW_EVERY_S:
            return self.id
        if self.id is not None:
            sid = self.id
            try:
                alive = self.client.call(lambda c: c.session.renew(sid))
            except consul.ConsulException:
                alive = None
            if alive:
                self._renewed_at = now
                return self.id
            log.info("session %s of %s is gone (a check failed?); creating a new one", sid, self.node)
            self.id = None
        try:
            self.id = create_session(self.client, self.home, self.node,
                                     session_checks(self.service_id), SESSION_TTL_S)
        except consul.ConsulException as exc:
            log.debug("session not created yet: %s", exc)
            return None
        self._renewed_at = now
        log.info("session %s created for %s", self.id, self.node)
        return self.id

    def destroy(self) -> None:
        sid, self.id = self.id, None
        if sid is not None:
            self.client.call(lambda c: c.session.destroy(sid))


def try_acquire(client: ConsulClient, key: str, sid: str, node: str) -> bool:
    """Take the lock at ``key`` with session ``sid`` (no-op if another holds it)."""
    value = kv.encode_manager(kv.ManagerRecord(node, int(time.time() * 1000)))
    try:
        return bool(client.call(lambda c: c.kv.put(key, value, acquire=sid)))
    except consul.ConsulException as exc:  # e.g. the session was just invalidated
        log.info("could not acquire %s: %s", key, exc)
        return False
