"""The chaos harness's stall measure (``Report.stalls``): the longest time
after a fault that no send was acknowledged, counted from the fault itself."""

from __future__ import annotations

import pytest

from tests.chaos.harness import STALL_WINDOW_S, Report, Scenario


def _report(faults: list[tuple[float, str, str]], acks: list[float]) -> Report:
    r = Report(Scenario("unit", fifo=True, sync=True, fault="freeze_writer", seed=1))
    r.faults, r.ack_times = faults, acks
    return r


def test_a_freeze_counts_from_the_freeze_not_from_the_thaw() -> None:
    # frozen at 10 s for 8 s; a new writer acknowledged from 13.5 s on
    r = _report([(10.0, "freeze", "h1")], [9.9, 9.95, 13.5, 13.6, 13.7, 18.1])
    assert r.stalls() == [pytest.approx(4.4)]  # (13.7 -> 18.1 is the longest gap)
    # no failover: nothing acknowledged until the thaw at 18 s
    assert _report([(10.0, "freeze", "h1")], [9.9, 18.2, 18.3]).stalls() == [pytest.approx(8.2)]


def test_the_gap_right_after_the_fault_counts_and_later_ones_within_the_window() -> None:
    r = _report([(5.0, "kill", "h1"), (7.0, "restart", "h1")], [4.9, 6.2, 6.3, 9.0, 9.1])
    assert r.stalls() == [pytest.approx(2.7)]  # (the restart is not a fault to measure)
    late = 5.0 + STALL_WINDOW_S + 1
    r = _report([(5.0, "kill", "h1")], [4.9, 5.5, late, late + 30])
    assert r.stalls() == [pytest.approx(late - 5.5)]  # a gap that starts after the window is not
    assert _report([(5.0, "cut", "h1")], [1.0, 4.0]).stalls() == []  # nothing acknowledged after it
