"""The host's HTTP endpoint: ``/health`` (Consul's HTTP check) and ``/metrics``
(Prometheus text format).

``/health`` answers 200 only while the request loop made progress within the
last few seconds, so a hung host is caught even though this thread runs.
``HEAD`` answers as ``GET`` (same status and headers), without the body.
Every answer names the host's node id in an ``X-Zmqueue-Node`` header: a
host starting under a node id asks the endpoint registered for it whether
that host still runs (:func:`node_answers`).
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from zmqueue.errors import StartupError

NODE_HEADER = "X-Zmqueue-Node"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Straight to the host: never through a proxy from HTTP(S)_PROXY."""


def node_answers(http_endpoint: str, node: str, timeout_s: float = 1.0) -> bool:
    """Whether a host with node id ``node`` answers at ``http_endpoint``
    (``http://host:port``), healthy or not. A refused connection, a timeout
    (a frozen process) or another node's answer is False."""
    try:
        with _DIRECT.open(f"{http_endpoint}/health", timeout=timeout_s) as resp:
            return bool(resp.headers.get(NODE_HEADER) == node)
    except urllib.error.HTTPError as exc:  # 503: a stalled loop, but a process that runs
        return bool(exc.headers.get(NODE_HEADER) == node)
    except (OSError, ValueError):
        return False


class HealthServer:
    def __init__(self, host: str, port: int, healthy: Callable[[], bool],
                 registry: CollectorRegistry, node: str = "",
                 why: Callable[[], str | None] | None = None) -> None:
        """``why``: what a failing answer says (Consul shows it as the check's
        output); default "request loop stalled"."""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send(*self._answer())

            def do_HEAD(self) -> None:
                """GET's status and headers, no body (a load balancer's or uptime probe's check)."""
                self._send(*self._answer(), head=True)

            def _answer(self) -> tuple[int, bytes, str]:
                if self.path.startswith("/health"):
                    ok = outer.healthy()
                    text = "ok" if ok else ((outer.why() if outer.why else None) or "request loop stalled")
                    return 200 if ok else 503, f"{text}\n".encode(), "text/plain"
                if self.path.startswith("/metrics"):
                    return 200, generate_latest(outer.registry), CONTENT_TYPE_LATEST
                return 404, b"try /health or /metrics\n", "text/plain"

            def _send(self, code: int, body: bytes, ctype: str, head: bool = False) -> None:
                self.send_response(code)
                self.send_header(NODE_HEADER, outer.node)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))  # (HEAD: what GET would send)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.healthy = healthy
        self.why = why
        self.registry = registry
        self.node = node
        try:
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise StartupError(f"cannot bind the HTTP health port {host}:{port}: {exc.strerror}; "
                               "pick another --http-port or 0 for a free one") from None
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="http-health",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
