"""``zmqueue demo`` (what ``make demo`` runs) end to end: its tour works on a
real local cluster, including the kill -9 of a host during pipelined sends,
and it stops every process it started."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path


def kill_processes_under(root: Path) -> list[str]:
    """SIGKILL every process whose command line names ``root`` (the demo's
    hosts and Consul agent keep their data there); their command lines."""
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes()
            if str(root).encode() in cmdline:
                os.kill(int(proc.name), signal.SIGKILL)
                left.append(cmdline.replace(b"\0", b" ").decode(errors="replace")[:200])
    return left


def test_the_demo_runs_its_tour_and_stops_everything(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    cmd = [sys.executable, "-m", "zmqueue", "demo", "--messages", "500", "--data-dir", str(work)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # the demo stops its cluster on Ctrl-C
        try:
            out, _ = proc.communicate(timeout=40)
        finally:
            proc.kill()
        raise
    finally:
        leftovers = kill_processes_under(work)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert leftovers == [], f"processes left running after the demo: {leftovers}"
    for row in ("demo-standard", "demo-orders.fifo"):
        line = rf"{re.escape(row)}\S*\s*│[^│]*│[^│]*│ 500\s*│ 500\s*│"  # messages, received
        assert re.search(line, text), f"{row}: 500 sent and received\n{text}"
    assert "in the dead-letter queue" in text and "redriven: 1 moved back" in text
    m = re.search(r"(\d+) confirmed, (\d+) sent again.*?received (\d+) of the (\d+) confirmed \((\d+) lost",
                  text, re.S)
    assert m, text[-4000:]
    confirmed, _, received, of, lost = map(int, m.groups())
    assert confirmed == 2000 and received == of == confirmed and lost == 0
    assert "started again from its data directory and is passing" in text
    assert "stopped every process the demo started" in text
