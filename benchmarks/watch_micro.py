"""What a host pass pays for its waiting consumers, in-process (no sockets).

    python benchmarks/watch_micro.py [--runs 5] [--json]
    PYTHONPATH=/path/to/older/tree python benchmarks/watch_micro.py

(``python -m benchmarks.parked`` runs it for each of its host trees and puts
the rows in docs/perf/parked.md.)

Two rows, each the best of ``--runs`` timings (a micro-benchmark: the
minimum is the cost, the rest is the machine's noise):

- ``due``: one pass's ``PartWatch.due`` + ``next_in`` with N partitions
  watched (a parked poll or a subscriber on each, nothing happening), one
  of them changed in the pass and looked at; what every host pass pays.
- ``cancel``: 64 clients each with a long poll parked on all 64 partitions
  of a queue; each then cancels 63 of them (what the client does when one
  partition answers): the mean cost of one CANCEL.

Run as a script (not ``-m``), the ``zmqueue`` package comes from PYTHONPATH,
so an older tree (a ``git archive`` of a commit) is measured by the same
code; the two ``PartWatch`` signatures (with and without the owner's map,
twenty-fourth session) are both handled.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
import timeit
from types import SimpleNamespace
from typing import Any

from zmqueue.dataplane.dispatch import Outbox, Request
from zmqueue.dataplane.partwatch import PartWatch
from zmqueue.dataplane.waiting import Waiters
from zmqueue.protocol import Command, Flags, Frame


def due_cost(n: int, runs: int) -> float:
    """Seconds per pass with ``n`` watched partitions."""
    watched = {(f"q{i}", 0): 1 for i in range(n)}
    owns_map = "watched" in inspect.signature(PartWatch.__init__).parameters
    watch: Any = PartWatch("a bench", watched) if owns_map else PartWatch("a bench")  # type: ignore[call-arg]
    svc = SimpleNamespace(set=SimpleNamespace(version=1), dirty={("q0", 0, "o")})
    now = 1000
    args: tuple[Any, ...] = (svc, now) if owns_map else (svc, now, watched)
    for part, _ in watch.due(*args):
        watch.schedule(part, now, [], None)

    def one_pass() -> None:
        for part, _ in watch.due(*args):
            watch.schedule(part, now, [], None)
        watch.next_in(now)

    number = 2000
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
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="one JSON object: microseconds per row")
    args = ap.parse_args()
    rows = {f"due_{n}_us": due_cost(n, args.runs) * 1e6 for n in (64, 2000)}
    rows["cancel_64x64_us"] = cancel_cost(64, 64, args.runs) * 1e6
    if args.json:
        print(json.dumps(rows))
        return
    for n in (64, 2000):
        print(f"due     {n:5d} watched partitions: {rows[f'due_{n}_us']:8.2f} us per pass")
    print(f"cancel  64 x 64 parked polls:       {rows['cancel_64x64_us']:8.2f} us per CANCEL")


if __name__ == "__main__":
    main()
