"""benchmarks.cpu_budget's arithmetic: CPU per message by process between two snapshots."""

from __future__ import annotations

import pytest

from benchmarks.cpu_budget import Snapshot, budget

MS = 1_000_000  # ns


def host(loop_ms: int, io_ms: int, other_ms: int) -> dict[str, int]:
    return {"loop": loop_ms * MS, "io": io_ms * MS, "other": other_ms * MS}


def test_the_busiest_host_is_the_writer_and_the_rest_are_replicas() -> None:
    a = Snapshot(10.0, 1000, {1: host(0, 0, 0), 2: host(0, 0, 0), 3: host(0, 0, 0)},
                 {"producer-0": 0, "consumer-0": 5 * MS})
    b = Snapshot(12.0, 2000, {1: host(100, 20, 4), 2: host(300, 60, 10), 3: host(80, 10, 2)},
                 {"producer-0": 50 * MS, "consumer-0": 75 * MS})
    r = budget(a, b, cpus=2)
    assert (r["writer_loop"], r["writer_io"], r["writer_other"]) == (300.0, 60.0, 10.0)  # us per message
    assert r["replicas"] == 216.0 and r["producers"] == 50.0 and r["consumers"] == 70.0
    assert r["total"] == 706.0 and r["msgs_per_s"] == 500.0
    assert r["busy"] == pytest.approx(0.706 / 4)  # 0.706 s of CPU in 2 s on 2 CPUs
    assert r["cpu_bound_at"] == pytest.approx(2e6 / 706)


def test_a_window_without_messages_is_an_error_not_a_division_by_zero() -> None:
    a = Snapshot(1.0, 10, {1: host(0, 0, 0)})
    with pytest.raises(ValueError, match="no message"):
        budget(a, Snapshot(2.0, 10, {1: host(1, 0, 0)}), cpus=2)
