"""``python -m benchmarks.peers --write`` regenerates docs/PERFORMANCE.md
around its last section, "Where the time goes", which it keeps word for word
(sessions add their findings there; the generator must not undo them)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.peers import prose
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
