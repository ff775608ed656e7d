"""``python -m benchmarks.peers --write`` regenerates docs/PERFORMANCE.md
around its last section, "Where the time goes", which it keeps word for word
(sessions add their findings there; the generator must not undo them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.peers import prose, writeup
from benchmarks.peers.writeup import ANALYSIS_HEADING, NO_ANALYSIS, kept_analysis


def test_the_analysis_section_is_read_back_word_for_word(tmp_path: Path) -> None:
    doc = tmp_path / "PERFORMANCE.md"
    body = "Measured {like this}, with braces.\n\n**A finding.** More text.\n\n- a list"
    doc.write_text(f"# Performance\n\n## Summary\n\ntables\n\n{ANALYSIS_HEADING}\n{body}\n")
    assert kept_analysis(doc) == body
    # what --write puts back is what it read: the template ends with the section
    page = prose.PERFORMANCE_MD.replace("{{", "{").replace("}}", "}")
    assert page.rstrip("\n").endswith(f"{ANALYSIS_HEADING}\n{{analysis}}")
    again = tmp_path / "again.md"
    again.write_text(f"# Performance\n\n{ANALYSIS_HEADING}\n{kept_analysis(doc)}\n")
    assert kept_analysis(again) == body


def test_a_page_without_the_section_gets_a_placeholder_that_says_where_to_write(tmp_path: Path) -> None:
    assert kept_analysis(tmp_path / "missing.md") == NO_ANALYSIS
    doc = tmp_path / "PERFORMANCE.md"
    doc.write_text("# Performance\n\n## Summary\n\nno analysis yet\n")
    assert kept_analysis(doc) == NO_ANALYSIS
    assert "--write" in NO_ANALYSIS and "heading" in NO_ANALYSIS


def test_the_repository_page_has_its_analysis() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "PERFORMANCE.md"
    text = kept_analysis(doc)
    assert text != NO_ANALYSIS and "CPU per request, thread by thread" in text


def test_single_send_rows_set_w1_and_w1p_beside_the_raw_single_payload_ceiling() -> None:
    from benchmarks.peers.writeup import single_ceiling_rows, summary_rows

    def run(e2e: float, p99: float = 1.0) -> dict[str, float]:
        return {"e2e_msgs_per_s": e2e, "send_p99_ms": p99, "lost": 0, "duplicates": 0, "sent": 1}

    g = {("W1", "zmqueue", 100): run(2_000.0), ("W1", "redis", 100): run(6_000.0, 0.4),
         ("W1", "nats", 100): run(3_000.0, 0.7),
         ("W1p", "zmqueue", 100): run(80_000.0), ("W1p", "redis", 100): run(40_000.0)}
    ceil = {100: {"dealer_router_single_per_s": 8_000.0, "dealer_router_single_p99_ms": 0.25,
                  "dealer_router_single_window100_payloads_per_s": 100_000.0}}
    rows = single_ceiling_rows(g, ceil, 100)
    assert [r[0] for r in rows] == [
        "W1 vs raw pyzmq single-payload round trips (1 in flight), 100 B",
        "W1p vs raw pyzmq single-payload round trips (100 in flight), 100 B",
        "W2 send p99 vs raw pyzmq single-payload p99 (nothing else running), 100 B"]
    assert rows[0][1:4] == ["2,000", "raw 8,000", "25%; 2x best peer = 1.50x raw"]  # 2 x redis 6,000
    assert rows[1][1:4] == ["80,000", "raw 100,000", "80%; 2x best peer = 0.80x raw"]
    assert rows[2][1:4] == ["1.00 ms", "raw 0.250 ms", "4.00x; best peer = 1.60x raw"]  # redis 0.4 ms
    # an invocation without the ceiling (or without zmqueue's W1) has no such rows
    assert single_ceiling_rows(g, {}, 100) == []
    assert single_ceiling_rows({}, ceil, 100) == []
    labels = [r[0] for r in summary_rows(g, ceil, [100])]
    assert rows[0][0] in labels and rows[1][0] in labels  # the summary table has them


def test_the_failover_row_reads_the_latest_alternated_run_before_the_first_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "perf").mkdir()
    page = tmp_path / "perf" / "replication.md"
    first = "| kills | 20 | ≥ 20 |\n| failover p50 | 1.57 s | ≤ 3 s |\n| failover max | 1.63 s | ≤ 10 s |\n"
    page.write_text(first)
    monkeypatch.setattr(writeup, "DOCS", tmp_path)
    [row] = writeup.replication_rows()
    assert row[1] == "p50 1.57 s, max 1.63 s" and row[-1] == "met"
    page.write_text(first + "\n| latest failover | B | A |\n|---|---:|---:|\n"
                    "| latest kills | 3 runs of 20 | 3 runs of 20 |\n"
                    "| latest failover p50 | 3.5 s | 1.0 s |\n| latest failover max | 4.0 s | 1.2 s |\n")
    [row] = writeup.replication_rows()
    assert row[1] == "p50 3.5 s (median of runs), max 4.0 s" and row[3] == "+2.50 s"
    assert "3 runs of 20 kills" in row[0] and row[-1] == "**missed**"
