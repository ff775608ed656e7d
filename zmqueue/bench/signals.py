"""SIGTERM and SIGINT as KeyboardInterrupt, so that ``finally`` blocks stop
every process a benchmark started (by pid) when it is interrupted.

Only the first signal raises: after it both are ignored until the block
ends, so a second Ctrl-C (or a SIGTERM after it) cannot cut the stopping
short and leave processes running (``zmqueue bench`` left its Consul agent
so, exit -2, when a second Ctrl-C came while it stopped its hosts). Each
stop is bounded (SIGTERM, then SIGKILL after a timeout); SIGKILL still ends
the benchmark itself at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def children_ignore_sigint() -> Iterator[None]:
    """SIGINT ignored while the block starts child processes, which keep it
    ignored (a disposition of SIG_IGN survives exec, and Python leaves it so):
    a Ctrl-C at a terminal signals the whole foreground process group, and
    each benchmark worker then printed a KeyboardInterrupt traceback, though
    the parent stops them itself (by event, then by pid). A SIGINT that comes
    while the block runs (process starts, milliseconds each) is lost."""
    if threading.current_thread() is not threading.main_thread():  # (only it may set handlers)
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
