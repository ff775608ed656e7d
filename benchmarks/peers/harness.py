"""Install, start and stop the peer servers: RabbitMQ, NATS (one node and a
3-node JetStream cluster) and Redis, from Debian 12's packages.

Every server listens on 127.0.0.1 only, keeps its data in a private temp
directory, runs in its own session and is stopped by pid (its process group)
in ``finally`` and on SIGINT/SIGTERM, which :func:`signals_raise` turns
into KeyboardInterrupt so the ``finally`` blocks run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from zmqueue.bench.signals import signals_raise
from zmqueue.localcluster.ports import free_port

__all__ = ["ensure_installed", "running", "signals_raise"]

PACKAGES = {"rabbitmq": "rabbitmq-server", "nats": "nats-server", "redis": "redis-server"}
RABBIT_SBIN = Path("/usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/sbin")
START_TIMEOUT_S = 90.0


def ensure_installed(peers: list[str]) -> None:
    """``apt-get install`` the Debian packages whose servers are missing."""
    missing = [PACKAGES[p] for p in peers if not _server_binary(p)]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def _server_binary(peer: str) -> str | None:
    if peer == "rabbitmq":
        found = sorted(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*/sbin/rabbitmq-server"))
        return str(found[-1]) if found else None
    return shutil.which(PACKAGES[peer])


class Server:
    """One child process in its own session, stopped by its pid's group."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.log = log

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            if not self.alive():
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)  # the group led by our child's pid
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
        with contextlib.suppress(ProcessLookupError):  # stragglers of the group (epmd children)
            os.killpg(self.proc.pid, signal.SIGKILL)

    def log_tail(self, n: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_bytes()[-n:].decode("utf-8", "replace")
        return ""


def wait_port(port: int, server: Server, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"{server.name} exited during start-up:\n{server.log_tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{server.name} did not listen on 127.0.0.1:{port} in {timeout_s} s")


def start_redis(work: Path) -> tuple[list[Server], dict[str, object]]:
    port = free_port()
    d = work / "redis"
    d.mkdir(parents=True)
    s = Server("redis", [str(_server_binary("redis")), "--bind", "127.0.0.1", "--port", str(port),
                         "--dir", str(d), "--appendonly", "yes", "--appendfsync", "everysec",
                         "--save", "", "--daemonize", "no", "--protected-mode", "yes"], d / "log")
    wait_port(port, s)
    return [s], {"port": port}


def start_nats(work: Path, nodes: int = 1) -> tuple[list[Server], dict[str, object]]:
    binary = str(_server_binary("nats"))
    ports = [free_port() for _ in range(nodes)]
    cluster_ports = [free_port() for _ in range(nodes)]
    servers = []
    for i in range(nodes):
        d = work / f"nats{nodes}-{i}"
        d.mkdir(parents=True)
        conf = [f'server_name: "n{i}"', f'listen: "127.0.0.1:{ports[i]}"',
                f'jetstream {{ store_dir: "{d / "js"}" }}']
        if nodes > 1:
            routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for j, p in enumerate(cluster_ports) if j != i)
            conf.append(f'cluster {{ name: "bench", listen: "127.0.0.1:{cluster_ports[i]}", '
                        f'routes: [{routes}] }}')
        (d / "nats.conf").write_text("\n".join(conf) + "\n")
        servers.append(Server(f"nats-{i}", [binary, "-c", str(d / "nats.conf")], d / "log"))
    for s, p in zip(servers, ports, strict=True):
        wait_port(p, s)
    return servers, {"urls": [f"nats://127.0.0.1:{p}" for p in ports]}


def start_rabbitmq(work: Path) -> tuple[list[Server], dict[str, object]]:
    sbin = Path(str(_server_binary("rabbitmq"))).parent
    port, dist, epmd_port = free_port(), free_port(), free_port()
    d = work / "rabbitmq"
    (d / "home").mkdir(parents=True)
    (d / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{port}\nloopback_users = none\n"
                                      "log.console = true\nlog.file = false\n")
    (d / "enabled_plugins").write_text("[].\n")
    env = {**os.environ, "HOME": str(d / "home"), "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
           "RABBITMQ_LOG_BASE": str(d / "log"), "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
           "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
           "RABBITMQ_NODENAME": "bench@localhost", "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
           "RABBITMQ_DIST_PORT": str(dist), "ERL_EPMD_ADDRESS": "127.0.0.1",
           "ERL_EPMD_PORT": str(epmd_port), "RABBITMQ_PID_FILE": str(d / "pid"),
           "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config")}
    epmd = Server("epmd", ["epmd", "-address", "127.0.0.1", "-port", str(epmd_port)], d / "epmd.log", env)
    wait_port(epmd_port, epmd)
    rabbit = Server("rabbitmq", [str(sbin / "rabbitmq-server")], d / "server.log", env)
    try:
        wait_port(port, rabbit, START_TIMEOUT_S)
    except BaseException:
        rabbit.stop()
        epmd.stop()
        raise
    return [rabbit, epmd], {"port": port}


STARTERS = {"redis": start_redis, "nats": start_nats, "rabbitmq": start_rabbitmq}


@contextlib.contextmanager
def running(peer: str, work: Path, nodes: int = 1) -> Iterator[dict[str, object]]:
    """Start ``peer`` (``nodes`` > 1 only for NATS), yield its addresses, stop it."""
    if peer == "nats":
        servers, info = start_nats(work, nodes)
    else:
        servers, info = STARTERS[peer](work)
    try:
        yield info
    finally:
        for s in servers:
            s.stop()
