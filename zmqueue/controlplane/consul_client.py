"""The Consul edge: one client over several agent addresses, with timeouts.

py-consul's sync client sets no HTTP timeout unless told and is not thread
safe, so every :class:`ConsulClient` passes a timeout on every call and is
used by one thread only. A failed call fails over to the next address; when
every address fails, :class:`~zmqueue.errors.ConsulUnavailable` says which
addresses were tried and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import consul
import requests

from zmqueue.errors import ConsulUnavailable

T = TypeVar("T")

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
            self._clients[addr] = c
        return c

    @property
    def address(self) -> str:
        return self.addresses[self._current]

    def call(self, fn: Callable[[consul.Consul], T]) -> T:
        errors: list[str] = []
        for i in range(len(self.addresses)):
            idx = (self._current + i) % len(self.addresses)
            addr = self.addresses[idx]
            try:
                result = fn(self._client(addr))
            except TRANSPORT_ERRORS as exc:
                errors.append(f"{addr}: {type(exc).__name__}")
                continue
            except consul.ConsulException as exc:
                text = str(exc).lower()
                server_gone = text.startswith(("500", "503")) and (
                    "rpc error" in text or "no leader" in text or "no cluster leader" in text)
                if not server_gone:
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
        raise ConsulUnavailable(
            f"cannot reach Consul at {', '.join(self.addresses)} ({'; '.join(errors)}); "
            "start it with `zmqueue up` or pass the right --consul HOST:PORT",
            addresses=list(self.addresses),
        )
