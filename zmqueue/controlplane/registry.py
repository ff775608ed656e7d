"""Host registration in Consul's service catalog, and its TTL heartbeat.

A host registers service ``zmqueue`` with id ``zmqueue-<node>``, tags
``cluster:<c>``, ``node:<n>``, ``version:<v>`` (and ``zone:<z>``), meta with
its endpoints, and a TTL check ``service:zmqueue-<node>``. The heartbeat
passes the check only while the host says it is healthy (its request loop
made progress recently), so a hung host goes critical even though its
heartbeat thread still runs. If Consul forgot the service (an agent restart),
the next heartbeat registers it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import consul

from zmqueue.controlplane.consul_client import AgentHome, ConsulClient
from zmqueue.errors import ConsulUnavailable

log = logging.getLogger(__name__)

SERVICE_NAME = "zmqueue"


@dataclass(frozen=True)
class Registration:
    cluster: str
    node: str
    version: str
    address: str
    client_port: int
    endpoints: dict[str, str] = field(default_factory=dict)
    zone: str = ""
    check_ttl_ms: int = 3000
    http_health_url: str | None = None

    @property
    def service_id(self) -> str:
        return f"{SERVICE_NAME}-{self.node}"

    @property
    def check_id(self) -> str:
        return f"service:{self.service_id}"

    def tags(self) -> list[str]:
        tags = [f"cluster:{self.cluster}", f"node:{self.node}", f"version:{self.version}"]
        if self.zone:
            tags.append(f"zone:{self.zone}")
        return tags

    def meta(self) -> dict[str, str]:
        meta = {"cluster": self.cluster, "node": self.node, "version": self.version}
        if self.zone:
            meta["zone"] = self.zone
        meta.update(self.endpoints)
        return meta


class Registrar:
    """Registers the host on the first agent of ``client`` that answers (it
    fails over like any client) and records that agent in ``home``, where the
    host's sessions must be created (see :class:`AgentHome`)."""

    def __init__(self, client: ConsulClient, reg: Registration,
                 home: AgentHome | None = None) -> None:
        self.client = client
        self.reg = reg
        self.home = home

    def register(self) -> None:
        reg = self.reg
        # passing from the start: the host registers (and re-registers, when an
        # agent it used died and another one does not know it) only while it
        # serves and heartbeats; a critical start would keep its writer session
        # from being recreated until the agent's next catalog sync of the
        # check, which after a Consul leader election can be 15 s or more away
        check = {
            "CheckID": reg.check_id, "Name": "zmqueue heartbeat", "TTL": f"{reg.check_ttl_ms}ms",
            "Status": "passing", "DeregisterCriticalServiceAfter": "30m",
        }
        extra = []
        if reg.http_health_url:
            # probed every second: a killed host's refused connection fails it at once; a
            # slow answer gets 3 s (the TTL check's window for a frozen host anyway): one
            # answer over 1 s on a loaded machine made the check critical, which ends the
            # session tied to it and releases every writer lock of a host that still runs
            extra.append({
                "Name": "zmqueue health endpoint", "CheckID": f"http:{reg.service_id}",
                "HTTP": reg.http_health_url, "Interval": "1s", "Timeout": "3s", "Status": "passing",
            })
        self.client.call(lambda c: c.agent.service.register(
            SERVICE_NAME, service_id=reg.service_id, address=reg.address, port=reg.client_port,
            tags=reg.tags(), meta=reg.meta(), check=check, extra_checks=extra or None,
        ))
        self._leave_old_home()
        self.heartbeat()

    def _leave_old_home(self) -> None:
        """Just registered on another agent than before (a failover): drop the
        registration left on the old one, if that agent still answers (it was
        only slow). Otherwise its checks would show critical in the catalog
        for 30 minutes, and the sessions tied to them would end 3 s later
        anyway; this ends them now."""
        old = self.home.address if self.home is not None else None
        if old is None or old == self.client.address:
            return
        try:
            self.client.call_at(old, lambda c: c.agent.service.deregister(self.reg.service_id))
            log.info("deregistered %s from the Consul agent at %s (now registered at %s)",
                     self.reg.service_id, old, self.client.address)
        except (ConsulUnavailable, consul.ConsulException) as exc:
            log.info("left %s registered at %s, which does not answer (%s)",
                     self.reg.service_id, old, exc)

    def heartbeat(self, stopped: Callable[[], bool] = lambda: False) -> None:
        """Pass the TTL check; register again if Consul forgot the service,
        unless ``stopped()`` says the host stops: its own deregistration,
        made once the heartbeat was stopped, is why a beat under way then
        finds no check (registered again, a stopped host stayed in the
        catalog, critical, for the 30 min of DeregisterCriticalServiceAfter)."""
        try:
            self.client.call(lambda c: c.agent.check.ttl_pass(self.reg.check_id))
        except consul.ConsulException as exc:
            text = str(exc).lower()
            if not isinstance(exc, consul.NotFound) and "unknown check" not in text \
                    and "does not have associated ttl" not in text:
                raise ConsulUnavailable(f"heartbeat failed: {str(exc)[:120]}") from None
            if stopped():
                log.info("service %s is deregistered: the host stops", self.reg.service_id)
                return
            log.warning("consul forgot service %s; registering it again", self.reg.service_id)
            self.register()
            return
        if self.home is not None:
            self.home.address = self.client.address

    def deregister(self) -> None:
        self.client.call(lambda c: c.agent.service.deregister(self.reg.service_id))


class Heartbeat(threading.Thread):
    """Passes the TTL check every ``interval_ms`` while ``healthy()`` holds.

    Owns its own ConsulClient (py-consul clients are not thread safe).
    """

    def __init__(self, registrar: Registrar, interval_ms: int, healthy: Callable[[], bool],
                 after_beat: Callable[[], object] | None = None,
                 why: Callable[[], str | None] | None = None) -> None:
        super().__init__(name="consul-heartbeat", daemon=True)
        self.registrar = registrar
        self.interval_s = interval_ms / 1000
        self.healthy = healthy
        self.why = why
        """Why the host is not healthy (logged with the withheld heartbeat)."""
        self._why_logged: tuple[str | None, float] = (None, 0.0)
        self.after_beat = after_beat
        """Called on this thread after each heartbeat that reached Consul (it
        may use ``registrar.client``): the host's advisory checks."""
        self._after_beat_logged = -60.0
        self.stopped = threading.Event()
        self.failures = 0

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            if not self.healthy():
                why = self.why() if self.why is not None else None
                if why is None or why != self._why_logged[0] or time.monotonic() - self._why_logged[1] >= 60:
                    if why is not None:  # (another reason than a stall: said once a minute)
                        self._why_logged = (why, time.monotonic())
                    log.warning("%s; withholding heartbeat", why or "request loop is not making progress")
                continue
            try:
                # (stop() comes before the host deregisters: a beat under way
                # that finds the check gone must not register it again)
                self.registrar.heartbeat(self.stopped.is_set)
                if self.failures:
                    log.info("consul reachable again after %d failed heartbeats", self.failures)
                self.failures = 0
                if not self.stopped.is_set():  # (the host may be deregistered by now)
                    self._after_beat()
            except ConsulUnavailable as exc:
                self.failures += 1
                if self.failures in (1, 10) or self.failures % 60 == 0:
                    log.warning("heartbeat failed (%d in a row): %s", self.failures, exc)

    def _after_beat(self) -> None:
        """``after_beat``, which must not end the heartbeat: a failure is
        logged (the first, then once a minute) and the beats go on."""
        if self.after_beat is None:
            return
        try:
            self.after_beat()
        except Exception:  # an advisory check is not worth the host's health
            now = time.monotonic()
            if now - self._after_beat_logged >= 60.0:
                self._after_beat_logged = now
                log.exception("an advisory check after the heartbeat failed; the heartbeat goes on")

    def stop(self) -> None:
        self.stopped.set()
