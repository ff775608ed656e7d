"""Health checks catch a hung host, and ``zmqueue up`` starts C clusters of H hosts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.conftest import HostFactory, wait_for
from tests.controlplane_integration.conftest import all_passing
from tests.helpers import check_statuses, consul_for
from zmqueue.localcluster import ConsulAgent


def test_a_sigstopped_host_goes_critical_on_both_its_heartbeat_and_its_http_check(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("n1")
    wait_for(lambda: all_passing(consul_agent, h.node), 15, "host passing")
    h.freeze()
    try:
        want = {f"service:zmqueue-{h.node}": "critical", f"http:zmqueue-{h.node}": "critical"}
        wait_for(lambda: check_statuses(consul_agent, h.node) == want, 15, "both checks critical")
    finally:
        h.thaw()
    wait_for(lambda: all_passing(consul_agent, h.node), 15, "host passing again after SIGCONT")


def stop_hosts_by_pid(data_root: Path) -> list[str]:
    """Kill the hosts a command left behind (each wrote its pid to host.json);
    the nodes that were still running."""
    alive = []
    for info in data_root.glob("*/host.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads(info.read_text())["pid"])
            # only that host: a pid of a process that exited may be reused
            if str(info.parent).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
                alive.append(info.parent.name)
    return alive


def test_zmqueue_up_brings_up_c_clusters_of_h_hosts(consul_agent: ConsulAgent, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "zmqueue", "up", "--clusters", "2", "--hosts", "2",
           "--consul", consul_agent.http_addr, "--data-dir", str(tmp_path / "up"), "--duration", "60"]
    # started the way a background job is, with SIGINT ignored: `up` must
    # still stop on it (and on SIGTERM)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    c = consul_for(consul_agent)

    def up_hosts() -> dict[str, str]:
        _, entries = c.health.service("zmqueue")
        return {e["Service"]["Meta"]["node"]: e["Service"]["Meta"]["cluster"] for e in entries
                if e["Service"]["Meta"]["node"] in {"c1-h1", "c1-h2", "c2-h1", "c2-h2"}
                and all(ch["Status"] == "passing" for ch in e["Checks"])}

    try:
        got = wait_for(lambda: len(up_hosts()) == 4 and up_hosts(), 40, "4 hosts passing")
        assert got == {"c1-h1": "c1", "c1-h2": "c1", "c2-h1": "c2", "c2-h2": "c2"}
    finally:
        proc.send_signal(signal.SIGINT)  # `zmqueue up` stops what it started on Ctrl-C
        try:
            out, _ = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.terminate()  # also stops its hosts first
            try:
                proc.communicate(timeout=40)
            finally:
                proc.kill()
            raise
        finally:
            # whatever happened, no host of this test outlives it (a leftover
            # host would register in the next tests' Consul agent)
            alive = stop_hosts_by_pid(tmp_path / "up" / "data")
    assert alive == [], f"hosts still running after `zmqueue up` stopped: {alive}"
    assert proc.returncode == 0, out.decode(errors="replace")
    assert b"stopped every process" in out
    _, entries = c.health.service("zmqueue")
    assert not {e["Service"]["Meta"]["node"] for e in entries} & {"c1-h1", "c2-h2"}



def test_zmqueue_up_says_when_a_host_it_started_is_killed_and_reaps_it(
        consul_agent: ConsulAgent, tmp_path: Path) -> None:
    """(It said nothing and left the host ``<defunct>`` until it stopped.)"""
    cmd = [sys.executable, "-m", "zmqueue", "up", "--clusters", "1", "--hosts", "2",
           "--consul", consul_agent.http_addr, "--data-dir", str(tmp_path / "up"), "--duration", "90"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    out = proc.stdout
    assert out is not None
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(out.readline, b"")), daemon=True)
    reader.start()

    def line_with(text: bytes) -> bytes | None:
        return next((ln for ln in list(lines) if text in ln), None)

    try:  # (a long line of up's is wrapped at 80 columns; the one about the host is not)
        wait_for(lambda: b"Ctrl-C stops everything" in b" ".join(b"".join(lines).split()), 60, "up running")
        pid = int(json.loads((tmp_path / "up" / "data" / "c1-h2" / "host.json").read_text())["pid"])
        os.kill(pid, signal.SIGKILL)
        said = wait_for(lambda: line_with(b"host c1-h2"), 10, "up saying the host exited").decode()
        assert (f"host c1-h2 (pid {pid}) exited: status -9, SIGKILL; not restarted (1 of 2 hosts "
                "running") in said, said
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 15, "the host reaped (no <defunct> left)")
        assert proc.poll() is None, "up goes on with the other host"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        finally:
            alive = stop_hosts_by_pid(tmp_path / "up" / "data")
        reader.join(5)
    assert alive == [], f"hosts still running after `zmqueue up` stopped: {alive}"
    text = b"".join(lines).decode(errors="replace")
    assert proc.returncode == 0 and "stopped every process" in text, text
