"""Client-side resilience: a circuit breaker and a bulkhead per host.

:class:`CircuitBreaker` (one per endpoint): after ``failure_threshold``
consecutive failures (timeouts, unreachable host) it *opens*: requests to
that host fail at once with :class:`CircuitOpen` (an Unavailable, so the
client routes to another replica) instead of waiting out a timeout each.
After ``reset_timeout_s`` it lets one probe through (*half-open*); a
success closes it, a failure opens it again. Errors that prove the host is
alive (NotLeader, Throttled, AccessDenied, ...) count as successes.

:class:`Bulkhead` (one per endpoint): at most ``max_concurrent`` requests in
flight to one host from this client; a thread that cannot get a slot within
``wait_s`` gets :class:`BulkheadFull`. A slow host therefore holds at most
that many of the client's threads and sockets, never all of them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from zmqueue.errors import RequestTimeout, Unavailable, ZmqueueError

FAILURE_THRESHOLD = 5
RESET_TIMEOUT_S = 2.0
MAX_CONCURRENT = 64
BULKHEAD_WAIT_S = 1.0


class CircuitOpen(Unavailable):
    """The client stopped sending to a failing host for a while; details:
    ``endpoint``, ``retry_after_ms``."""


class BulkheadFull(Unavailable):
    """Too many requests in flight to one host from this client; details: ``endpoint``, ``limit``."""


class CircuitBreaker:
    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(self, endpoint: str, failure_threshold: int = FAILURE_THRESHOLD,
                 reset_timeout_s: float = RESET_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.failure_threshold = failure_threshold
        self.reset_timeout_s = reset_timeout_s
        self.state = self.CLOSED
        self.failures = 0
        self.opened_at = 0.0
        self.probing = False
        self.lock = threading.Lock()
        self.transitions: list[str] = []

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.transitions.append(state)

    def before(self) -> None:
        """Raise CircuitOpen unless a request may go now."""
        if self.state == self.CLOSED:
            return  # the common case, without the lock (a stale read only delays a trip)
        with self.lock:
            if self.state == self.CLOSED:
                return
            waited = time.monotonic() - self.opened_at
            if self.state == self.OPEN and waited >= self.reset_timeout_s:
                self._set(self.HALF_OPEN)
            if self.state == self.HALF_OPEN and not self.probing:
                self.probing = True
                return
            retry = max(1, int((self.reset_timeout_s - waited) * 1000))
            raise CircuitOpen(f"circuit to {self.endpoint} is open after {self.failures} failures; "
                              f"probing again in {retry} ms", endpoint=self.endpoint, retry_after_ms=retry)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """``with breaker.guard(): <one request>``: ``before()``, then a
        timeout counts as a failure and any answer, even an error reply or a
        refused handshake (a CURVE key it does not accept), as a success
        (the host is alive)."""
        self.before()
        try:
            yield
        except RequestTimeout as exc:
            if exc.details.get("refused"):  # its handshake refused this client: the host is alive
                self.success()
            else:
                self.failure()
            raise
        except ZmqueueError:
            self.success()
            raise
        self.success()

    def success(self) -> None:
        if self.state == self.CLOSED and not self.failures and not self.probing:
            return  # the common case: nothing to change (reads of plain attributes)
        with self.lock:
            self.failures = 0
            self.probing = False
            self._set(self.CLOSED)

    def failure(self) -> None:
        with self.lock:
            self.failures += 1
            self.probing = False
            if self.state == self.HALF_OPEN or self.failures >= self.failure_threshold:
                self.opened_at = time.monotonic()
                self._set(self.OPEN)


class Bulkhead:
    """A counting semaphore with a deadline, written for the uncontended case
    (one lock round trip to take a slot, one to give it back), which is every
    request of a client that stays under ``max_concurrent``."""

    def __init__(self, endpoint: str, max_concurrent: int = MAX_CONCURRENT,
                 wait_s: float = BULKHEAD_WAIT_S) -> None:
        self.endpoint = endpoint
        self.limit = max_concurrent
        self.wait_s = wait_s
        self.in_flight = 0
        self.waiting = 0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)

    def slot(self) -> Bulkhead:
        """``with bulkhead.slot():`` holds one slot for the block."""
        return self

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Take a slot (waiting up to ``wait_s``) or raise BulkheadFull."""
        with self.lock:
            if self.in_flight >= self.limit:
                self.waiting += 1
                try:
                    free = self.cond.wait_for(lambda: self.in_flight < self.limit, self.wait_s)
                finally:
                    self.waiting -= 1
                if not free:
                    raise BulkheadFull(f"{self.limit} requests to {self.endpoint} are already in flight "
                                       "from this client", endpoint=self.endpoint, limit=self.limit)
            self.in_flight += 1

    def release(self) -> None:
        with self.lock:
            self.in_flight -= 1
            if self.waiting:
                self.cond.notify()


class Guards:
    """The breakers and bulkheads of one client, by endpoint."""

    def __init__(self, failure_threshold: int = FAILURE_THRESHOLD, reset_timeout_s: float = RESET_TIMEOUT_S,
                 max_concurrent: int = MAX_CONCURRENT, wait_s: float = BULKHEAD_WAIT_S) -> None:
        self.args = (failure_threshold, reset_timeout_s, max_concurrent, wait_s)
        self.breakers: dict[str, CircuitBreaker] = {}
        self.bulkheads: dict[str, Bulkhead] = {}
        self.pairs: dict[str, tuple[CircuitBreaker, Bulkhead]] = {}
        """Read without the lock (a dict lookup is atomic); written under it."""
        self.lock = threading.Lock()

    def for_endpoint(self, endpoint: str) -> tuple[CircuitBreaker, Bulkhead]:
        pair = self.pairs.get(endpoint)
        if pair is not None:
            return pair
        with self.lock:
            b = self.breakers.get(endpoint)
            if b is None:
                b = self.breakers[endpoint] = CircuitBreaker(endpoint, self.args[0], self.args[1])
                self.bulkheads[endpoint] = Bulkhead(endpoint, self.args[2], self.args[3])
            pair = self.pairs[endpoint] = (b, self.bulkheads[endpoint])
            return pair
