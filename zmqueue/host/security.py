"""The host's front-door wiring: CURVE keys and the ZAP handler, policies,
the front door's hooks on the dispatcher, at-rest ciphers, usage records.

Everything here is off unless configured, except usage records and
metering, which are always on. Runs its snapshot updates on the loop thread.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import zmq

from zmqueue.config import HostConfig, QueueConfig
from zmqueue.controlplane import keyring
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.kvlayout import KeyRecord
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.dataplane.dispatch import Dispatcher, Request
from zmqueue.dataplane.service import QueueService
from zmqueue.errors import ConsulUnavailable, StartupError
from zmqueue.security.atrest import KeyDir
from zmqueue.security.curve import CurveKeys
from zmqueue.security.frontdoor import FrontDoor
from zmqueue.security.usage import UsageBook
from zmqueue.security.zap import KeyEntry, ZapHandler

log = logging.getLogger(__name__)

ENDPOINT_META = ("client_endpoint", "pub_endpoint", "peer_endpoint")


class HostSecurity:
    def __init__(self, cfg: HostConfig, data_dir: Path) -> None:
        self.cfg = cfg
        self.keys = CurveKeys.from_file(cfg.curve_secret_file) if cfg.curve_secret_file else None
        self.zap: ZapHandler | None = None
        self.keydir = KeyDir(cfg.key_dir)
        self.usage = UsageBook(data_dir, cfg.node, cfg.usage_flush_interval_ms)
        self.policies: dict[str, dict[str, tuple[str, ...]]] = {}
        self.door: FrontDoor | None = None
        self.key_problem: str | None = None
        """Why this host's own CURVE key is not registered as this host's
        (:meth:`own_key_problem`), None when it is: the host is unhealthy
        meanwhile (its peers refuse it), so it is not placed or elected."""

    @property
    def curve(self) -> tuple[bytes, bytes] | None:
        return (self.keys.public, self.keys.secret) if self.keys else None

    def meta(self) -> dict[str, str]:
        """Published in the host's Consul service meta."""
        return {"curve_public": self.keys.public.decode()} if self.keys else {}

    def start_zap(self, ctx: zmq.Context[zmq.Socket[bytes]], consul: ConsulClient) -> None:
        """Bind the ZAP handler (before any CURVE socket binds) with the keys
        registered now; snapshots keep them fresh. A host whose own key is
        not registered as its own (:meth:`own_key_problem`) does not start:
        the other hosts would refuse every connection it makes, while it
        passed its checks, was placed as a replica and elected writer."""
        if self.keys is None:
            return
        self.zap = ZapHandler(ctx).start()
        try:
            keys = keyring.list_keys(consul)
        except ConsulUnavailable as exc:
            log.warning("could not read registered keys yet (%s): refusing every key until Consul "
                        "answers", exc)
            return
        self._set_keys(keys)
        problem = self.own_key_problem(keys)
        if problem is not None:
            raise StartupError(problem)

    def own_key_problem(self, keys: dict[tuple[str, str], KeyRecord]) -> str | None:
        """Why the registered keys do not admit this host's public key as host
        ``node`` (the name a host's position reports must carry), or None.
        One line, saying what to run."""
        assert self.keys is not None
        node, cluster = self.cfg.node, self.cfg.cluster
        public = self.keys.public.decode()
        secret = Path(self.cfg.curve_secret_file or "")
        pub_file = secret.with_suffix(".key") if secret.with_suffix(".key").exists() else secret
        register = (f"run `zmqueue keys register --public {pub_file} --role host --name {node}` "
                    "(docs/SECURITY.md)")
        rec = keyring.allowed_keys(keys, cluster).get(public)
        if rec is None:
            others = [s for (s, name) in keys if name == node and s in (keyring.GLOBAL, cluster)]
            why = (f" (the key registered as {node!r} is another one: registering this one replaces it)"
                   if others else "")
            return (f"this host's CURVE public key {public} (from {secret}) is not registered for "
                    f"cluster {cluster} as host {node!r}{why}: every other host refuses its connections; "
                    f"{register}, then start the host")
        if rec.role != "host" or rec.name != node:
            return (f"this host's CURVE public key {public} is registered as {rec.role} {rec.name!r}, "
                    f"not as host {node!r} (its node id, the name its position reports carry): revoke "
                    f"that registration (`zmqueue keys revoke --name {rec.name}`) and {register}")
        return None

    def _set_keys(self, keys: dict[tuple[str, str], KeyRecord]) -> None:
        assert self.zap is not None
        allowed = keyring.allowed_keys(keys, self.cfg.cluster)
        self.zap.set_keys({pub.encode(): KeyEntry(r.name, r.role) for pub, r in allowed.items()})

    def role_of(self, user: str | None) -> str | None:
        return self.zap.role_of(user) if self.zap is not None else None

    def wire(self, dispatcher: Dispatcher, service: QueueService) -> FrontDoor:
        door = FrontDoor(lambda: service.meta.configs, lambda: self.policies, self.role_of, self.usage)

        def meter(req: Request, result: Any, size: int) -> None:
            door.on_reply(req.sock, req.user, req.frame, req.started, result, size, req.note)

        dispatcher.guard = door.check
        dispatcher.meter = meter
        service.set.cipher_for = self.cipher_for
        service.forwarder.curve = self.keys
        self.door = door
        return door

    def cipher_for(self, cfg: QueueConfig) -> Any:
        return self.keydir.cipher(cfg.name) if cfg.encrypted else None

    def on_snapshot(self, snap: Snapshot) -> None:
        """Loop thread: new policies, allowed keys and peers' server keys."""
        self.policies = dict(snap.state.policies)
        if self.keys is None:
            return
        self._set_keys(snap.state.keys)
        problem = self.own_key_problem(snap.state.keys)
        if problem != self.key_problem:
            if problem is not None:
                log.error("%s (until then this host fails its health check)", problem)
            else:
                log.info("this host's CURVE key is registered as host %r again: healthy", self.cfg.node)
            self.key_problem = problem
        servers: dict[str, bytes] = {}
        for h in snap.hosts:
            pub = h.meta.get("curve_public")
            if pub:
                for name in ENDPOINT_META:
                    if h.meta.get(name):
                        servers[h.meta[name]] = pub.encode()
        self.keys.learn(servers)

    def tick(self, now_ms: int) -> None:
        self.usage.maybe_flush(now_ms)

    def close(self) -> None:
        self.usage.flush(int(time.time() * 1000))
        if self.zap is not None:
            self.zap.stop()
