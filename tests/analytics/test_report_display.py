"""How the report shows itself: the progress display (the step bar counts, Spark's
line, which has no total, shows no count) and the HTML tables' numbers."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
from rich.progress import Progress

from analytics.progress import Count
from analytics.report import _whole


def test_a_bar_shows_its_count_and_a_line_without_a_total_shows_none() -> None:
    progress = Progress(disable=True)
    steps = progress.add_task("latency", total=11, completed=3)
    spark = progress.add_task("spark: idle", total=None)
    column = Count()
    assert column.render(progress.tasks[steps]).plain == "3/11"
    assert column.render(progress.tasks[spark]).plain == "", "was '0/None'"


def test_a_count_column_with_nulls_shows_whole_numbers_and_blanks() -> None:
    pdf = pd.DataFrame({"bytes": [None, 7.0], "lag_ms": [0.5, 51.2], "messages": [1, 2]})
    html = _whole(pdf).to_html(index=False, na_rep="")
    assert "<td>7</td>" in html and "7.0" not in html, "a consumer's null bytes made the column float"
    assert "<td>0.5</td>" in html and "<td>51.2</td>" in html, "fractions stay"
    assert _whole(pdf)["messages"].tolist() == [1, 2]
