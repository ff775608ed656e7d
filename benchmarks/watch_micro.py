"""What a host pass pays for its waiting consumers, in-process (no sockets).

    python benchmarks/watch_micro.py [--runs 5] [--json]
    PYTHONPATH=/path/to/older/tree python benchmarks/watch_micro.py

(``python -m benchmarks.parked`` runs it for each of its host trees and puts
the rows in docs/perf/parked.md.)

Two rows, each the best of ``--runs`` timings (a micro-benchmark: the
minimum is the cost, the rest is the machine's noise):

- ``pass``: one host pass's ``Waiters.serve`` (and the hand-over of the
  pass's changed streams) with a long poll parked on each of N partitions,
  nothing receivable, one partition changed in the pass (and looked at);
  what every host pass pays for them.
- ``cancel``: 64 clients each with a long poll parked on all 64 partitions
  of a queue; each then cancels 63 of them (what the client does when one
  partition answers): the mean cost of one CANCEL.

Run as a script (not ``-m``), the ``zmqueue`` package comes from PYTHONPATH,
so an older tree (a ``git archive`` of a commit) is measured by the same
code; the hand-over of each tree's ``Waiters`` is used (none before the
twenty-third session, ``note_changed`` with and without the map since).
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
import timeit
from types import SimpleNamespace
from typing import Any, cast

from benchmarks import _args
from zmqueue.dataplane.dispatch import Outbox, Request
from zmqueue.dataplane.waiting import Waiters
from zmqueue.protocol import Command, Flags, Frame


class _Store:
    """A stream with nothing receivable and no visibility time coming."""

    def has_visible(self, now: int) -> bool:
        return False

    def next_wakeup_ms(self, now: int) -> int | None:
        return None


def due_cost(n: int, runs: int) -> float:
    """Seconds per ``Waiters.serve`` pass with a long poll parked on each of
    ``n`` partitions, nothing receivable, one partition changed in the pass."""
    streams = {(f"q{i}", 0): [SimpleNamespace(store=_Store())] for i in range(n)}
    svc = SimpleNamespace(set=SimpleNamespace(led_streams=streams.__getitem__, version=1),
                          dirty={("q0", 0, "o")}, take=lambda *a: {"m": []})
    waiters = Waiters()
    for i, part in enumerate(streams):
        req = Request("client", b"c", Frame(Command.RECEIVE, Flags.NONE, i, {}), Outbox())
        waiters.park(part, req, 10, None, 10**12)
    watch = getattr(waiters, "watch", None)
    if watch is not None and "watched" in inspect.signature(watch.note_changed).parameters:
        def hand_over() -> None:  # (the twenty-third session's signature)
            watch.note_changed(svc.dirty, waiters.by_part)
    elif watch is not None:
        def hand_over() -> None:
            watch.note_changed(svc.dirty)
    else:  # (before the twenty-third session: nothing to hand over)
        def hand_over() -> None:
            pass

    def one_pass() -> None:
        waiters.serve(cast(Any, svc), 1000)
        hand_over()

    one_pass()
    number = 500
    return min(timeit.repeat(one_pass, number=number, repeat=runs)) / number


def cancel_cost(parts: int, clients: int, runs: int) -> float:
    """Seconds per CANCEL with ``clients`` polls parked on each of ``parts`` partitions."""
    best = float("inf")
    for _ in range(runs):
        waiters = Waiters()
        for c in range(clients):
            for p in range(parts):
                req = Request("client", b"c%d" % c, Frame(Command.RECEIVE, Flags.NONE, p, {}), Outbox())
                waiters.park(("q", p), req, 10, None, 10**12)
        t0 = time.perf_counter()
        for c in range(clients):
            for p in range(1, parts):
                if not waiters.cancel(b"c%d" % c, p):
                    raise RuntimeError(f"poll {c}/{p} not found")
        best = min(best, (time.perf_counter() - t0) / (clients * (parts - 1)))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=_args.runs, default=5)
    ap.add_argument("--json", action="store_true", help="one JSON object: microseconds per row")
    args = ap.parse_args()
    rows = {f"due_{n}_us": due_cost(n, args.runs) * 1e6 for n in (64, 2000)}
    rows["cancel_64x64_us"] = cancel_cost(64, 64, args.runs) * 1e6
    if args.json:
        print(json.dumps(rows))
        return
    for n in (64, 2000):
        print(f"pass    {n:5d} partitions with a poll: {rows[f'due_{n}_us']:8.2f} us per pass")
    print(f"cancel  64 x 64 parked polls:       {rows['cancel_64x64_us']:8.2f} us per CANCEL")


if __name__ == "__main__":
    main()
