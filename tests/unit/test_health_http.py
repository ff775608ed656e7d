"""The host's HTTP endpoint answers HEAD as GET, without the body (it said
501 Unsupported method: an uptime probe or load balancer checking with HEAD
saw a failing host)."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from zmqueue.host.health import NODE_HEADER, HealthServer


@pytest.fixture
def server() -> Iterator[tuple[HealthServer, list[bool]]]:
    registry = CollectorRegistry()
    Counter("zmqueue_test_things", "things", registry=registry).inc(3)
    state = [True]
    srv = HealthServer("127.0.0.1", 0, lambda: state[0], registry, node="n1")
    srv.start()
    try:
        yield srv, state
    finally:
        srv.stop()


def ask(srv: HealthServer, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/health", "/metrics", "/nothing"])
def test_head_answers_as_get_without_a_body(server: tuple[HealthServer, list[bool]], path: str) -> None:
    srv, _ = server
    status, headers, body = ask(srv, "GET", path)
    h_status, h_headers, h_body = ask(srv, "HEAD", path)
    assert (h_status, h_body) == (status, b"")
    assert status == (404 if path == "/nothing" else 200) and body
    assert h_headers[NODE_HEADER] == "n1" and h_headers["Content-Type"] == headers["Content-Type"]
    if path != "/metrics":  # (the metrics may change between the two requests)
        assert h_headers["Content-Length"] == str(len(body))
    else:
        assert b"zmqueue_test_things_total 3.0" in body


def test_head_on_health_says_503_when_the_loop_stalled(server: tuple[HealthServer, list[bool]]) -> None:
    srv, state = server
    state[0] = False
    assert ask(srv, "HEAD", "/health")[::2] == (503, b"")
    assert ask(srv, "GET", "/health")[::2] == (503, b"request loop stalled\n")
