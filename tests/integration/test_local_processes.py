"""ManagedProcess, what `zmqueue up`, the demo and the tests start hosts with:
a stop ends the process even when Popen takes it for exited already; and
LocalCluster, which starts them."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue.errors import StartupError
from zmqueue.localcluster import HostProcess, LocalCluster
from zmqueue.localcluster.proc import ManagedProcess


def test_stop_ends_a_child_that_popen_takes_for_exited(tmp_path: Path) -> None:
    mp = ManagedProcess([sys.executable, "-c", "import signal; signal.pause()"], tmp_path / "child.log")
    mp.start()
    assert mp.proc is not None
    pid = mp.proc.pid
    try:
        wait_for(mp.running_by_pid, 10, "the child running")
        mp.proc.returncode = 0  # what poll() says once waitpid has failed with ECHILD
        assert not mp.alive()
        mp.stop(timeout_s=5)
        assert not mp.running_by_pid(), "the child outlived stop()"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # reap it: Popen no longer will


def test_running_by_pid_is_false_for_an_ordinary_stop(tmp_path: Path) -> None:
    mp = ManagedProcess([sys.executable, "-c", "import signal; signal.pause()"], tmp_path / "child.log")
    mp.start()
    wait_for(mp.running_by_pid, 10, "the child running")
    assert mp.stop(timeout_s=5) == -signal.SIGTERM
    assert not mp.running_by_pid() and not mp.alive()


def test_a_local_cluster_started_twice_says_so_and_keeps_its_hosts(
        hosts: HostFactory, tmp_path: Path) -> None:
    """``with LocalCluster(...).start() as lc`` used to start every host twice
    (the second ones failing on their locked data directories), then raised
    and left them running; now the block takes the started cluster over."""
    lc = LocalCluster(tmp_path / "lc", hosts=1, consul=hosts.agent.http_addr)
    with lc:
        first = lc.hosts[0]
        with pytest.raises(StartupError, match="started already"):
            lc.start()
        assert lc.hosts == [first] and first.alive()
    assert not first.alive()
    # the with block takes over a cluster start() started, and stops it (raising there
    # left every process running)
    with LocalCluster(tmp_path / "lc2", hosts=1, consul=hosts.agent.http_addr).start() as lc2:
        [only] = lc2.hosts
        assert only.alive()
    assert not only.alive()


def test_a_host_that_exits_by_itself_is_told_apart_from_one_the_caller_ended(
        hosts: HostFactory, tmp_path: Path) -> None:
    """What the test fixtures and the chaos harness use to fail a test whose
    host crashed (it used to pass unnoticed unless an assertion tripped on it)."""
    crashes = HostProcess("c1", "bad", tmp_path / "bad", hosts.agent.http_addr, tmp_path / "logs",
                          ["--no-such-option"]).start()  # argparse: exits 2 by itself
    wait_for(lambda: not crashes.alive(), 30, "the host with a bad option to exit")
    killed = hosts.start("killed")
    stopped = hosts.start("stopped")
    killed.kill9()
    for h in (crashes, killed, stopped):
        h.stop()
    assert crashes.died() and crashes.proc.found_exited == 2
    assert not killed.died() and not stopped.died()
    assert crashes.ending() == "had exited: status 2" and "SIGKILL" in killed.ending()
    assert stopped.ending() == "running until stopped"


def test_a_second_host_under_a_running_node_id_is_refused_and_a_killed_ones_id_is_free(
        hosts: HostFactory, tmp_path: Path) -> None:
    """Two processes under one node id would take each other's sessions and
    writer locks (a copy started by mistake from an empty directory became the
    stream's writer from seq 0). The second is refused while the first answers
    on its health endpoint; once the first is killed, its id starts again."""
    first = hosts.start("twin")
    wait_for(lambda: all_passing(check_statuses(hosts.agent, first.node)), 60, "the first host passing")
    second = HostProcess(first.cluster, first.node, tmp_path / "other-dir", hosts.agent.http_addr,
                         tmp_path / "logs2")
    try:
        second.start()
        wait_for(lambda: not second.alive(), 60, "the second host to give up")
        second.stop()
        assert second.proc.found_exited not in (None, 0)
        assert "is already running" in second.log_tail() and "own --node" in second.log_tail()
    finally:
        second.stop()
    assert first.alive() and all_passing(check_statuses(hosts.agent, first.node))
    first.kill9()
    again = hosts.restart(first)  # at once: its registration still reads passing for a moment
    wait_for(lambda: all_passing(check_statuses(hosts.agent, again.node)), 60, "the restarted host passing")
    assert again.alive()
