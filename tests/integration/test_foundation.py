"""Foundation: hosts register in a real Consul, heartbeat, go critical when
killed, deregister when stopped, and answer PING and STATUS."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import zmq

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.helpers import check_statuses, service_entry
from zmqueue import protocol
from zmqueue.client.transport import call
from zmqueue.errors import ProtocolError
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import Command
from zmqueue.version import __version__


def passing(agent: ConsulAgent, node: str) -> bool:
    st = check_statuses(agent, node)
    return bool(st) and all(s == "passing" for s in st.values())


def test_a_host_registers_with_its_cluster_node_endpoints_and_version(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 15, "host passing")
    entry = service_entry(consul_agent, h.node)
    assert entry is not None
    svc = entry["Service"]
    assert svc["Service"] == "zmqueue"
    assert f"cluster:{h.cluster}" in svc["Tags"] and f"node:{h.node}" in svc["Tags"]
    meta = svc["Meta"]
    assert meta["cluster"] == h.cluster and meta["node"] == h.node
    assert meta["version"] == __version__
    for key in ("client_endpoint", "pub_endpoint", "peer_endpoint", "http_endpoint"):
        assert meta[key].startswith(("tcp://127.0.0.1:", "http://127.0.0.1:")), key
    # both the TTL heartbeat and the HTTP health probe are registered and passing
    assert set(check_statuses(consul_agent, h.node)) == {
        f"service:zmqueue-{h.node}", f"http:zmqueue-{h.node}"}


def test_ping_and_status_work_end_to_end(hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 15, "host passing")
    endpoint = service_entry(consul_agent, h.node)["Service"]["Meta"]["client_endpoint"]  # type: ignore[index]
    ctx = zmq.Context()
    try:
        pong = call(ctx, endpoint, Command.PING, None)
        assert pong["pong"] is True and pong["node"] == h.node
        status = call(ctx, endpoint, Command.STATUS, None)
        assert status["node"] == h.node and status["cluster"] == h.cluster
        assert status["pid"] == h.pid
    finally:
        ctx.term()


def test_a_malformed_frame_gets_an_error_reply_and_the_host_keeps_serving(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 15, "host passing")
    endpoint = service_entry(consul_agent, h.node)["Service"]["Meta"]["client_endpoint"]  # type: ignore[index]
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    try:
        # a valid header with a broken body: answered with MALFORMED_FRAME
        bad = protocol.encode_request(Command.PING, 77, None)[:16] + b"\xc1\xc1\xc1"
        dealer.send(bad)
        assert dealer.poll(5000)
        reply = protocol.decode(dealer.recv())
        assert reply.is_error and reply.request_id == 77
        assert reply.body["code"] == ProtocolError.code
        # pure garbage: dropped, counted; the host still answers
        dealer.send(b"garbage")
        dealer.send_multipart([b"a", b"b", b"c"])
        # (another connection's STATUS may overtake those frames: poll)
        wait_for(lambda: call(ctx, endpoint, Command.STATUS, None)["counters"]["malformed"] >= 3,
                 10, "the three malformed frames counted")
    finally:
        dealer.close()
        ctx.term()


def test_a_host_killed_with_sigkill_is_critical_in_consul_within_5_seconds(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 15, "host passing")
    killed_at = time.monotonic()
    h.kill9()
    wait_for(lambda: check_statuses(consul_agent, h.node).get(f"service:zmqueue-{h.node}")
             == "critical", 5.0, "critical TTL check after SIGKILL")
    assert time.monotonic() - killed_at <= 5.0


def test_a_clean_stop_deregisters_the_host(hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 15, "host passing")
    assert h.stop() == 0
    wait_for(lambda: service_entry(consul_agent, h.node) is None, 15, "deregistration")


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zmqueue", *args], capture_output=True,
                          text=True, timeout=timeout)


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_an_unknown_flag_gives_a_one_line_error() -> None:
    res = run_cli("host", "--cluster", "c", "--node", "n", "--data-dir", "/tmp/x", "--bogus")
    assert res.returncode == 2
    assert_one_line_error(res, "unrecognized arguments: --bogus", "--help")


def test_an_unreachable_consul_gives_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    res = run_cli("host", "--cluster", "c", "--node", "n", "--data-dir", str(tmp_path / "d"),
                  "--consul", dead)
    assert_one_line_error(res, "cannot reach Consul", dead, "--consul")


def test_an_unwritable_data_dir_gives_a_one_line_error(
        tmp_path: Path, consul_agent: ConsulAgent) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = run_cli("host", "--cluster", "c", "--node", "n", "--data-dir", str(blocker / "sub"),
                  "--consul", consul_agent.http_addr)
    assert_one_line_error(res, "not writable", "--data-dir")


def test_a_port_already_in_use_gives_a_one_line_error(
        tmp_path: Path, consul_agent: ConsulAgent) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_cli("host", "--cluster", "c", "--node", "n", "--data-dir", str(tmp_path / "d"),
                      "--consul", consul_agent.http_addr, "--client-port", str(port))
    assert_one_line_error(res, f"port {port}", "already in use")


def test_two_hosts_cannot_share_a_data_dir(hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 15, "host passing")
    res = run_cli("host", "--cluster", "c", "--node", "other", "--data-dir", str(h.data_dir),
                  "--consul", consul_agent.http_addr)
    assert_one_line_error(res, "in use by another host")
    info = json.loads((h.data_dir / "host.json").read_text())
    assert info["pid"] == h.pid


def test_a_host_refuses_a_data_dir_another_node_wrote_and_its_owner_still_has_its_messages(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """(A host started with --node c1-h5 on the directory of a killed c1-h4
    served c1-h4's streams as a replica of its own: the manager counted it
    caught up at once, and an R=1 partition was left with replicas
    [c1-h4, c1-h7], refusing every send.)"""
    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 30, "host passing")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
        q = client.create_queue(f"owned-{hosts.uid}", replication_factor=1)
        q.send(b"kept")
    h.kill9()
    other = f"n2-{hosts.uid}"
    res = run_cli("host", "--cluster", h.cluster, "--node", other, "--data-dir", str(h.data_dir),
                  "--consul", consul_agent.http_addr, timeout=20)
    assert_one_line_error(res, f"belongs to node '{h.node}'", f"not to node '{other}'",
                          f"--node {h.node}", "fresh, empty --data-dir")
    assert json.loads((h.data_dir / "host.json").read_text())["node"] == h.node
    assert not [p for p in (h.data_dir / "queues").rglob(other)], "opened streams of its own"
    h2 = hosts.restart(h)
    wait_for(lambda: passing(consul_agent, h2.node), 30, "owner passing again")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as client:
        q = client.get_queue(f"owned-{hosts.uid}")
        got = wait_for(lambda: q.receive(wait_time=1), 30, "the owner's message")
        assert [m.body for m in got] == [b"kept"]


def test_a_fresh_host_exports_every_dispatcher_event_an_alert_watches_at_zero(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """(``pass_errors`` and the ``*_served_late`` counters, which the
    operator guide says should stay 0, were not exported until they were not
    0, so an alert could not tell 0 from missing.)"""
    from tests.security.harness import scrape
    from zmqueue.host.metrics import DISPATCHER_EVENTS

    h = hosts.start("n1")
    wait_for(lambda: passing(consul_agent, h.node), 60, "host passing")
    text = scrape(h)
    for event in DISPATCHER_EVENTS:
        assert f'zmqueue_dispatcher_events_total{{event="{event}"}}' in text, event
    for event in ("pass_errors", "polls_served_late", "pushes_served_late"):
        assert f'zmqueue_dispatcher_events_total{{event="{event}"}} 0.0' in text, event
