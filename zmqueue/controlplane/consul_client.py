"""The Consul edge: one client over several agent addresses, with timeouts.

py-consul's sync client sets no HTTP timeout unless told and is not thread
safe, so every :class:`ConsulClient` passes a timeout on every call and is
used by one thread only. A failed call fails over to the next address; when
every address fails, :class:`~zmqueue.errors.ConsulUnavailable` says which
addresses were tried and what to do. An address where some other HTTP server
answers (a web app on the wrong port) counts as one that failed, with its own
message (:func:`not_consul`): py-consul's raw "Missing index header" would
otherwise reach the operator as a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import consul
import requests

from zmqueue.errors import ConsulUnavailable, NotConsul

T = TypeVar("T")

REFUSALS = ("missing check", "in critical state", "invalid session", "permission denied",
            "acl not found")
"""Consul's answers that start like a lost server ("500 rpc error making
call: ...") but are the server's verdict on the request itself: another
agent would give the same answer (or, for "missing check", a misleading one:
the checks live on one agent, see :class:`AgentHome`)."""


def server_gone(exc: consul.ConsulException) -> bool:
    """The agent answered but could not reach a Consul server (one just died,
    or an election is running): as good as unreachable."""
    text = str(exc).lower()
    if not text.startswith(("500", "503")) or any(r in text for r in REFUSALS):
        return False
    return "rpc error" in text or "no leader" in text or "no cluster leader" in text


def not_consul(exc: consul.ConsulException) -> str | None:
    """Why ``exc`` shows the server that answered is no Consul agent, or None.

    Consul sets ``X-Consul-Index`` on every read that py-consul asks an index
    of, answers JSON where JSON is expected, and never an HTML page on
    ``/v1/`` (a web server's error page: ``501 <!DOCTYPE HTML ...``)."""
    text = str(exc)
    if text.startswith("Missing index header"):
        return "no X-Consul-Index header"
    if text.startswith("Failed to decode JSON"):
        return "its answer is not JSON"
    head = text[:200].lower()
    if "<html" in head or "<!doctype" in head:
        return "it answered with an HTML page"
    return None


def not_consul_message(address: str, reason: str) -> str:
    return (f"the server at {address} answered but is not a Consul agent ({reason}): "
            "check --consul / CONSUL_HTTP_ADDR")


class AgentHome:
    """The Consul agent that holds a host's registration: its service and the
    checks its sessions are tied to.

    Consul creates a session only through the agent whose node has the
    session's checks (elsewhere: "Missing check ... registration"). A host's
    threads each own a :class:`ConsulClient` and fail over on their own, so
    after a Consul agent dies they can land on different agents; the
    heartbeat re-registers the service where it lands and records that here,
    and the threads that create sessions go there first
    (:meth:`ConsulClient.prefer`). Shared between threads: one str
    assignment, atomic under the GIL."""

    def __init__(self) -> None:
        self.address: str | None = None


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    requests.RequestException,
    OSError,
    consul.Timeout,
)


class ConsulClient:
    """Calls ``fn(consul.Consul)`` on the current address, failing over."""

    def __init__(self, addresses: Sequence[str], timeout_s: float = 2.0,
                 agent_local: bool = False) -> None:
        """``agent_local``: the caller's state lives on the agent it talks to
        (service registration, TTL checks, sessions on that agent's checks):
        fail over only when the agent is unreachable, never merely because it
        has no Consul server leader for a moment (a hop would register the
        service twice and let the abandoned copy's checks go critical)."""
        self.agent_local = agent_local
        if not addresses:
            raise ValueError("at least one Consul address is needed")
        self.addresses = tuple(addresses)
        self.timeout_s = timeout_s
        self._clients: dict[str, consul.Consul] = {}
        self._current = 0

    def _client(self, addr: str) -> consul.Consul:
        c = self._clients.get(addr)
        if c is None:
            host, _, port = addr.rpartition(":")
            c = consul.Consul(host=host, port=int(port), connections_timeout=self.timeout_s)
            session = getattr(getattr(c, "http", None), "session", None)
            if isinstance(session, requests.Session):
                # straight to the agent: no proxy from HTTP(S)_PROXY, no
                # ~/.netrc, which requests would read again on every call
                # (~0.2 ms of this process's CPU a call, a quarter of it)
                session.trust_env = False
            self._clients[addr] = c
        return c

    def close(self) -> None:
        """Close the HTTP connections kept to the agents (a later call opens new ones)."""
        clients, self._clients = self._clients, {}
        for c in clients.values():
            session = getattr(getattr(c, "http", None), "session", None)
            if isinstance(session, requests.Session):
                session.close()

    @property
    def address(self) -> str:
        return self.addresses[self._current]

    def prefer(self, address: str | None) -> None:
        """Make ``address`` (one of :attr:`addresses`) the first one tried."""
        if address in self.addresses:
            self._current = self.addresses.index(address)

    def call_at(self, address: str, fn: Callable[[consul.Consul], T]) -> T:
        """``fn`` on ``address`` alone (no failover): for what lives on one
        agent. ConsulUnavailable when it cannot be reached."""
        try:
            return fn(self._client(address))
        except TRANSPORT_ERRORS as exc:
            raise ConsulUnavailable(f"cannot reach Consul at {address} ({type(exc).__name__})",
                                    addresses=[address]) from None
        except consul.ConsulException as exc:
            reason = not_consul(exc)
            if reason is None:
                raise
            raise NotConsul(not_consul_message(address, reason), addresses=[address]) from None

    def call(self, fn: Callable[[consul.Consul], T]) -> T:
        errors: list[str] = []
        impostors: list[str] = []  # where a server other than Consul answered, as messages
        for i in range(len(self.addresses)):
            idx = (self._current + i) % len(self.addresses)
            addr = self.addresses[idx]
            try:
                result = fn(self._client(addr))
            except TRANSPORT_ERRORS as exc:
                errors.append(f"{addr}: {type(exc).__name__}")
                continue
            except consul.ConsulException as exc:
                reason = not_consul(exc)
                if reason is not None:  # the wrong server: try the next address
                    impostors.append(not_consul_message(addr, reason))
                    continue
                if not server_gone(exc):
                    raise
                if self.agent_local:
                    raise ConsulUnavailable(
                        f"Consul at {addr} has no server leader right now ({str(exc)[:80]})",
                        addresses=list(self.addresses)) from None
                # the agent is up but cannot reach a Consul server (one just died,
                # or an election is running): as good as unreachable
                errors.append(f"{addr}: {str(exc)[:80]}")
                continue
            self._current = idx
            return result
        if impostors:
            unreachable = f"; cannot reach Consul at {'; '.join(errors)}" if errors else ""
            raise NotConsul("; ".join(impostors) + unreachable, addresses=list(self.addresses))
        raise ConsulUnavailable(
            f"cannot reach Consul at {', '.join(self.addresses)} ({'; '.join(errors)}); "
            "start it with `zmqueue up` or pass the right --consul HOST:PORT",
            addresses=list(self.addresses),
        )


def create_session(client: ConsulClient, home: AgentHome | None, node: str, checks: list[str],
                   ttl_s: int) -> str:
    """A host's Consul session (``zmqueue-<node>``, behavior release, no lock
    delay) tied to ``checks``, created through ``home``: only the agent
    holding the checks accepts it, and a thread left on another agent by a
    failover would be refused for good."""
    if home is not None:
        client.prefer(home.address)
    return str(client.call(lambda c: c.session.create(
        name=f"zmqueue-{node}", behavior="release", lock_delay=0, ttl=ttl_s, checks=checks)))
