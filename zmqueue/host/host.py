"""The host: composition root of one ``zmqueue host`` process.

It owns the data directory (locked, so two hosts never share one), binds the
data-plane sockets, serves /health and /metrics over HTTP, registers in
Consul with a heartbeat, and runs the request loop until SIGTERM/SIGINT,
then deregisters. The data plane never talks to Consul: the host hands it
what the control plane learns.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import consul
import zmq
from prometheus_client import CollectorRegistry

from zmqueue.config import HostConfig
from zmqueue.controlplane.advisory import WarningCheck
from zmqueue.controlplane.consul_client import AgentHome, ConsulClient
from zmqueue.controlplane.discovery import DISK_CHECK_PREFIX, list_hosts
from zmqueue.controlplane.leadership import Leadership
from zmqueue.controlplane.managers import ManagerRoles, RolesConfig
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.registry import Heartbeat, Registrar, Registration
from zmqueue.controlplane.writer_election import (
    Candidacy,
    ConsulOutage,
    Deposed,
    Elected,
    Event,
    Opened,
    Waiting,
)
from zmqueue.dataplane.dispatch import Dispatcher, Request
from zmqueue.dataplane.forwarder import Forwarder
from zmqueue.dataplane.server import RequestLoop, Sockets, Wakeable
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import StorageConfig, disk_free
from zmqueue.dataplane.topology import StreamKey
from zmqueue.errors import ConsulUnavailable, StartupError
from zmqueue.host.admin import AdminHandlers
from zmqueue.host.metadata import MetadataCache, to_metadata
from zmqueue.host.metrics import HostCollector, on_loop, snapshot
from zmqueue.host.security import HostSecurity
from zmqueue.protocol import Command
from zmqueue.version import __version__

log = logging.getLogger(__name__)

STALL_LIMIT_S = 5.0
NEAR_RESERVE_SHARE = 4
"""The ``disk:`` check already warns with less free than the reserve plus a
quarter of it (16 MiB over the default 64 MiB): a send that would cut into
the reserve is refused, a large one first."""
"""The loop counts as hung when it made no progress for this long."""


def lock_data_dir(path: Path) -> TextIO:
    """Create, probe and lock the data dir; a clear StartupError otherwise."""
    hint = "choose another --data-dir or fix its permissions"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-probe"
        with open(probe, "wb") as f:
            f.write(b"ok")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
        lock = open(path / "host.lock", "a+")  # noqa: SIM115 - held for the process lifetime
    except OSError as exc:
        raise StartupError(f"data dir {path} is not writable ({exc.strerror}); {hint}") from None
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise StartupError(f"data dir {path} is in use by another host; give each host its own "
                           "--data-dir") from None
    return lock


def check_data_dir_owner(path: Path, node: str, cluster: str) -> None:
    """StartupError unless ``host.json`` in the (locked) data dir names this
    node and cluster, or is missing (a fresh directory).

    A data dir holds the streams of the node that wrote it: their directories
    are named after that node, and its replica slots and positions in Consul
    are under its id. Another node on that directory would serve them as its
    own (OPERATOR_GUIDE § A host's data directory)."""
    info_path = path / "host.json"
    try:
        info = json.loads(info_path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read {info_path} ({exc}): it names the node this data dir "
                           "belongs to; restore it, or give a fresh --data-dir") from None
    if not isinstance(info, dict):
        raise StartupError(f"{info_path} is not a JSON object: it names the node this data dir belongs "
                           "to; restore it, or give a fresh --data-dir")
    owner, owner_cluster = info.get("node"), info.get("cluster")
    if owner != node or owner_cluster != cluster:
        raise StartupError(
            f"data dir {path} belongs to node {owner!r} of cluster {owner_cluster!r} (its host.json), "
            f"not to node {node!r} of cluster {cluster!r}: start the host with --node {owner} "
            f"--cluster {owner_cluster}, or give node {node!r} a fresh, empty --data-dir")


class HostHooks:
    """Loop hooks: run what other threads posted, then the queue service;
    every few ticks, tell the leadership thread what to campaign for."""

    def __init__(self, cache: MetadataCache, service: QueueService) -> None:
        self.cache = cache
        self.service = service
        self.leadership: Leadership | None = None
        self.next_update = 0.0
        self.cands: dict[StreamKey, Candidacy] = {}
        self.cands_version = -1
        self.security: HostSecurity | None = None

    def tick(self, now_ms: int, ready: frozenset[Wakeable] | None = None) -> int | None:
        if ready is None or self.cache.wake_fd in ready:
            self.cache.drain_wake()
        self.cache.run_posted()
        wake = self.service.tick(now_ms, ready)
        if self.security is not None:
            self.security.tick(now_ms)
        if time.monotonic() >= self.next_update:
            self._tell_leadership()
        return wake

    def _tell_leadership(self) -> None:
        if self.leadership is None:
            return
        self.next_update = time.monotonic() + 0.1
        svc = self.service
        svc.opening_asked = False
        if svc.set.version != self.cands_version:  # (hundreds of streams: not every time)
            self.cands_version = svc.set.version
            self.cands = {k: Candidacy(*c) for k, c in svc.candidacies().items()}
        positions, confirmations, acked, terms = svc.leadership_view()
        self.leadership.update(self.cands, positions, confirmations, svc.opening, acked, terms, svc.unserved)

    def wake_sockets(self) -> list[Wakeable]:
        svc = self.service
        return [svc.replicator.sub, *svc.forwarder.socks.values(), self.cache.wake_fd]

    def flush(self) -> None:
        busy = bool(self.service.dirty)
        started = time.monotonic()
        self.service.flush()
        if self.service.opening_asked:  # a stream's first acknowledgements wait for its mark
            self._tell_leadership()
        door = self.security.door if self.security is not None else None
        if busy and door is not None:
            door.commit.observe("flush", time.monotonic() - started)

    def close(self) -> None:
        if self.leadership is not None:
            self.leadership.stop()
            self.leadership.join(timeout=5)
        self.cache.stop()
        self.service.close()


class Host:
    def __init__(self, config: HostConfig) -> None:
        self.config = config.validate()
        self.data_dir = Path(config.data_dir)
        self.started_at = time.time()
        self.stopping = threading.Event()
        self.metrics = CollectorRegistry()
        self.dispatcher = Dispatcher()
        self.dispatcher.register(Command.PING, self._ping)
        self.dispatcher.register(Command.STATUS, self._status)
        self.hooks: HostHooks | None = None
        self._lock: TextIO | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self.sockets: Sockets | None = None
        self.loop: RequestLoop | None = None
        self.heartbeat: Heartbeat | None = None
        self.registrar: Registrar | None = None
        self.roles: ManagerRoles | None = None
        self.leadership: Leadership | None = None
        self.health: Any = None
        self.security = HostSecurity(config, self.data_dir)

    # --- handlers -------------------------------------------------------
    def _ping(self, req: Request) -> Any:
        return {"pong": True, "node": self.config.node, "time_ms": int(time.time() * 1000)}

    def _status(self, req: Request) -> Any:
        assert self.sockets is not None
        return {
            "node": self.config.node, "cluster": self.config.cluster, "version": __version__,
            "pid": os.getpid(), "uptime_s": round(time.time() - self.started_at, 3),
            "endpoints": self.sockets.endpoints.as_meta(), "zone": self.config.zone,
            "counters": dict(self.dispatcher.counters),
        }

    # --- lifecycle ------------------------------------------------------
    def healthy(self) -> bool:
        return self.unhealthy_reason() is None

    def unhealthy_reason(self) -> str | None:
        """Why the host's checks fail, None while it is healthy: its request
        loop stalled, or its CURVE key is no longer registered as its own
        (revoked or replaced in KV while it runs: its peers refuse it)."""
        if self.loop is None or time.monotonic() - self.loop.last_progress >= STALL_LIMIT_S:
            return "request loop is not making progress"
        return self.security.key_problem

    def start(self) -> None:
        from zmqueue.host.health import HealthServer

        cfg = self.config
        self._lock = lock_data_dir(self.data_dir)
        check_data_dir_owner(self.data_dir, cfg.node, cfg.cluster)
        self._ctx = zmq.Context()
        try:
            self.security.start_zap(self._ctx, ConsulClient(cfg.consul, cfg.consul_timeout_ms / 1000))
        except StartupError:  # (its own key is not registered)
            self.close()
            raise
        self.sockets = Sockets(self._ctx, cfg.bind_host, cfg.client_port, cfg.pub_port, cfg.peer_port,
                               curve=self.security.curve)
        cache = MetadataCache(cfg.consul, cfg.consul_timeout_ms / 1000, self._apply_snapshot,
                              self._metadata_unavailable)
        service = QueueService(cfg.node, self.data_dir, Forwarder(self._ctx), self.sockets.pub,
                               cache.refresh, StorageConfig(min_free_bytes=cfg.min_free_bytes,
                                                             segment_roll_ms=cfg.segment_roll_ms))
        door = self.security.wire(self.dispatcher, service)
        service.register(self.dispatcher)
        AdminHandlers(cache).register(self.dispatcher)
        self.hooks = HostHooks(cache, service)
        self.hooks.security = self.security
        zap = self.security.zap
        self.metrics.register(HostCollector(lambda: on_loop(cache.post, lambda: snapshot(
            service, door, dict(zap.counters) if zap else {}, dict(self.dispatcher.counters)))))
        self.loop = RequestLoop(self.sockets, self.dispatcher, self.hooks)
        self.health = HealthServer(cfg.bind_host, cfg.http_port, self.healthy, self.metrics, cfg.node,
                                   why=self.unhealthy_reason)
        self.health.start()
        http_url = f"http://{cfg.bind_host}:{self.health.port}/health"
        endpoints = {**self.sockets.endpoints.as_meta(),
                     "http_endpoint": f"http://{cfg.bind_host}:{self.health.port}",
                     **self.security.meta()}
        port = int(self.sockets.endpoints.client.rsplit(":", 1)[1])
        reg = Registration(cluster=cfg.cluster, node=cfg.node, version=__version__,
                           address=cfg.bind_host, client_port=port, endpoints=endpoints,
                           zone=cfg.zone, check_ttl_ms=cfg.check_ttl_ms, http_health_url=http_url)
        home = AgentHome()  # the agent holding the registration: sessions are made there
        registrar = Registrar(ConsulClient(cfg.consul, cfg.consul_timeout_ms / 1000, agent_local=True),
                              reg, home)
        try:
            twin = self._running_twin(registrar.client, endpoints["http_endpoint"])
            if twin is not None:
                self.close()
                raise StartupError(
                    f"node {cfg.node!r} is already running: the host registered under that id "
                    f"answers at {twin}. Give each host its own --node, or stop the other one first")
            # before registering: once its checks pass, host.json names this process
            self._write_info(endpoints)
            registrar.register()
        except ConsulUnavailable as exc:
            self.close()
            raise StartupError(str(exc)) from None
        self.registrar = registrar
        hb_registrar = Registrar(
            ConsulClient(cfg.consul, cfg.consul_timeout_ms / 1000, agent_local=True), reg, home)
        disk = WarningCheck(hb_registrar.client, reg.service_id, DISK_CHECK_PREFIX + reg.service_id,
                            "zmqueue data disk", "the data disk is below the host's reserve")
        self.heartbeat = Heartbeat(hb_registrar, cfg.heartbeat_interval_ms, self.healthy,
                                   lambda: disk.report(self.disk_note()), why=self.unhealthy_reason)
        self.heartbeat.start()
        cache.service_id = reg.service_id
        cache.start()
        self._drop_stale_sessions()
        self.leadership = Leadership(
            cfg.consul, cfg.consul_timeout_ms / 1000, cfg.node,
            # the host's own checks only: hosts talk to shared Consul agents, and
            # a session tied to that agent's serfHealth would drop every writer
            # lock when that one Consul server dies (see docs/REPLICATION.md)
            [reg.check_id, f"http:{reg.service_id}"],
            {"node": cfg.node, "endpoint": self.sockets.endpoints.client, "epoch": 0},
            lambda ev: cache.post(lambda: self._on_leadership(ev)), home,
            outage_grace_s=cfg.outage_grace_ms / 1000)
        self.hooks.leadership = self.leadership
        self.leadership.start()
        self.roles = ManagerRoles(RolesConfig(cfg.node, cfg.cluster, reg.service_id, cfg.consul,
                                              cfg.consul_timeout_ms / 1000), cache.feed, home)
        self.roles.start()
        log.info("host %s (cluster %s) serving on %s", cfg.node, cfg.cluster, endpoints)

    def _drop_stale_sessions(self) -> None:
        """Destroy the Consul sessions of an earlier run of this node.

        A host killed and restarted within a check interval re-registers the
        same checks, which pass again, so its old sessions never go critical:
        they keep its writer and manager locks until their TTL runs out (10 s,
        up to twice that in Consul). This process holds the node's data
        directory lock and has created no session yet, so every session under
        the node's name belongs to a dead process."""
        node = self.config.node
        name = f"zmqueue-{node}"
        assert self.registrar is not None, "register first"
        client = self.registrar.client
        try:
            _, sessions = client.call(lambda c: c.session.list())
            for s in sessions or []:
                if s.get("Name") == name:
                    sid = str(s.get("ID"))
                    client.call(lambda c: c.session.destroy(sid))  # noqa: B023
                    log.info("destroyed session %s left by an earlier run of %s", sid, node)
        except (ConsulUnavailable, consul.ConsulException) as exc:
            log.warning("could not clear the sessions of an earlier run (their locks are "
                        "freed when their TTL runs out): %s", exc)

    def _apply_snapshot(self, snap: Snapshot, forward: bool) -> None:
        assert self.hooks is not None
        self.security.on_snapshot(snap)
        self.hooks.service.apply_metadata(to_metadata(snap), int(time.time() * 1000), forward)

    def _on_leadership(self, ev: Event) -> None:
        assert self.hooks is not None
        svc = self.hooks.service
        if isinstance(ev, ConsulOutage):
            svc.on_consul_outage(ev.since, ev.grace_s)
        elif isinstance(ev, Waiting):
            svc.on_waiting(ev.stream, ev.note)
        elif isinstance(ev, Elected):
            svc.on_elected(ev.stream, ev.epoch)
        elif isinstance(ev, Deposed):
            svc.on_deposed(ev.stream)
        elif isinstance(ev, Opened):
            svc.on_opened(ev.stream)
        else:
            svc.on_confirmed(ev.streams, ev.at, ev.by_consul)

    def _metadata_unavailable(self) -> None:
        assert self.hooks is not None
        self.hooks.service.metadata_unavailable()

    def _write_info(self, endpoints: dict[str, str]) -> None:
        info = {"node": self.config.node, "cluster": self.config.cluster, "pid": os.getpid(),
                **endpoints}
        tmp = self.data_dir / "host.json.tmp"
        tmp.write_text(json.dumps(info))
        tmp.replace(self.data_dir / "host.json")

    def _running_twin(self, client: ConsulClient, own_http: str) -> str | None:
        """The HTTP endpoint of another running host registered under this
        node id, if any (two processes under one id would take each other's
        sessions and writer locks). A registration left by a killed or frozen
        run does not count: its endpoint must answer with this node id."""
        from zmqueue.host.health import node_answers

        for h in list_hosts(client):
            http = h.meta.get("http_endpoint")
            if h.node == self.config.node and http and http != own_http and node_answers(http, h.node):
                return http
        return None

    def disk_note(self) -> str:
        """What the ``disk:`` advisory check says: empty while the data disk
        has at least the reserve (``--min-free-disk-mb``) free."""
        reserve = self.config.min_free_bytes
        free = disk_free(self.data_dir)
        near = reserve // NEAR_RESERVE_SHARE
        if not reserve or free >= reserve + near:
            return ""
        if free >= reserve:  # (a send that would cut into the reserve is refused: a large one, first)
            return (f"{free >> 20} MiB free on the disk of {self.data_dir}, within "
                    f"{near >> 20} MiB of this host's {reserve >> 20} MiB reserve "
                    "(--min-free-disk-mb): sends that would cut into it (large messages and batches "
                    "first) are refused with DISK_FULL, receives and deletes go on. Free space on that "
                    "disk, or drain this host.")
        return (f"{free >> 20} MiB free on the disk of {self.data_dir}, below this host's "
                f"{reserve >> 20} MiB reserve (--min-free-disk-mb): new messages are refused with "
                "DISK_FULL (a standard queue's sends go to its other replicas), receives and deletes "
                "go on. Free space on that disk, or drain this host.")

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, frame: object) -> None:
            log.info("signal %d: stopping", signum)
            self.stopping.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def run(self) -> None:
        assert self.loop is not None, "start() first"
        while not self.stopping.is_set():
            self.loop.run_guarded()
        self.close()

    def close(self) -> None:
        if self.roles is not None:
            self.roles.stop()
        if self.heartbeat is not None:
            self.heartbeat.stop()
            # a beat under way finishes before the deregistration (bounded: a
            # Consul call that hangs is left; heartbeat() checks stopped anyway)
            self.heartbeat.join(timeout=2.0)
        if self.registrar is not None:
            try:
                self.registrar.deregister()
            except ConsulUnavailable as exc:
                log.warning("could not deregister: %s", exc)
        if self.hooks is not None:
            self.hooks.flush()
            self.hooks.close()
        self.security.close()
        if self.health is not None:
            self.health.stop()
        if self.sockets is not None:
            self.sockets.close()
        if self._ctx is not None:
            self._ctx.term()
        if self._lock is not None:
            self._lock.close()
