"""A progress display while Spark runs: the report's step, and Spark's active stages and tasks."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

POLL_S = 0.25


class Count(ProgressColumn):
    """``completed/total`` of a bar; nothing for a line without a total (Spark's)."""

    def render(self, task: Task) -> Text:
        return Text("" if task.total is None else f"{int(task.completed)}/{int(task.total)}")


class SparkProgress:
    """``with SparkProgress(spark, steps) as p: p.step("latency")``: a bar over the
    report's steps, and a line with Spark's running stages and task counts."""

    def __init__(self, spark: Any, steps: int, console: Console | None = None,
                 enabled: bool = True) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 Count(), TimeElapsedColumn(),
                                 console=console or Console(stderr=True), disable=not enabled,
                                 transient=False)
        self.steps = self.progress.add_task("starting", total=steps)
        self.spark_line = self.progress.add_task("spark: idle", total=None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="spark-progress", daemon=True)
        self._current: str | None = None

    def __enter__(self) -> SparkProgress:
        self.progress.start()
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self._current is not None and t is None:
            self.progress.advance(self.steps)
        self.progress.update(self.steps, description="done" if t is None else "failed")
        self.progress.update(self.spark_line, visible=False)  # Spark's line says nothing once it is over
        self.progress.stop()

    def step(self, name: str) -> None:
        if self._current is not None:
            self.progress.advance(self.steps)
        self._current = name
        self.progress.update(self.steps, description=name)

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                text = self._describe()
            except Exception:  # the JVM may be busy or shutting down; the display is best effort
                continue
            self.progress.update(self.spark_line, description=text)

    def _describe(self) -> str:
        stages = [self.tracker.getStageInfo(s) for s in self.tracker.getActiveStageIds()]
        stages = [s for s in stages if s is not None]
        if not stages:
            return "spark: idle"
        done = sum(s.numCompletedTasks for s in stages)
        total = sum(s.numTasks for s in stages)
        active = sum(s.numActiveTasks for s in stages)
        return f"spark: {len(stages)} stage(s), tasks {done}/{total} done, {active} running"
