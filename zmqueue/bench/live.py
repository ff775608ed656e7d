"""The live progress display of ``zmqueue bench`` (rich, on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.text import Text

from zmqueue.bench.stats import fmt_rate


class LiveProgress:
    def __init__(self, label: str, duration_s: float, enabled: bool = True) -> None:
        self.label = label
        self.duration_s = duration_s
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.live: Live | None = None
        self._last: tuple[float, int, int] = (0.0, 0, 0)

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            self.live = Live(Text(self.label), console=self.console, refresh_per_second=4,
                             transient=True)
            self.live.__enter__()
        return self

    def update(self, elapsed_s: float, sent: int, received: int) -> None:
        if self.live is None:
            return
        t, s, r = self._last
        dt = max(1e-3, elapsed_s - t)
        phase = "sending" if elapsed_s < self.duration_s else "draining"
        line = (f"{self.label}: {phase} {elapsed_s:5.1f}/{self.duration_s:.0f} s  "
                f"sent {sent:,} ({fmt_rate((sent - s) / dt)})  "
                f"received {received:,} ({fmt_rate((received - r) / dt)})  "
                f"backlog {sent - received:,}")
        self._last = (elapsed_s, sent, received)
        self.live.update(Text(line))

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

