"""Two pytest-xdist workers never collide on ports or Consul state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_two_xdist_workers_running_hosts_with_the_same_names_do_not_collide() -> None:
    probe = Path(__file__).with_name("probe_xdist.py")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", str(probe)],
        capture_output=True, text=True, timeout=180, cwd=probe.parents[2],
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "2 passed" in res.stdout
