"""The report's progress display: the step bar counts, Spark's line (no total) shows no count."""

from __future__ import annotations

from rich.progress import Progress

from analytics.progress import Count


def test_a_bar_shows_its_count_and_a_line_without_a_total_shows_none() -> None:
    progress = Progress(disable=True)
    steps = progress.add_task("latency", total=11, completed=3)
    spark = progress.add_task("spark: idle", total=None)
    column = Count()
    assert column.render(progress.tasks[steps]).plain == "3/11"
    assert column.render(progress.tasks[spark]).plain == "", "was '0/None'"
