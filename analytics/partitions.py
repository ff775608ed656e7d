"""Cutting the read units of a log into Spark partitions of about equal size.

Without option ``minPartitions`` every read unit (a segment file, or a block
range of one larger than ``splitBytes``) is one Spark partition. With it (the
session's parallelism: the jobs pass ``spark.sparkContext.defaultParallelism``)
the units are laid end to end and cut into ``count`` shares of about equal
bytes, each cut moved to the first block at or past it, so a partition is a
list of block ranges, possibly of several files::

    count = max(minPartitions, ceil(total / splitBytes)), rounded up to a multiple of minPartitions

Why: each Spark task over a Python data source has a fixed cost (executor,
Python worker and Arrow stream set-up: tens of ms of CPU), and equal
partitions in a multiple of the cores keep every core busy to the end, where
one task per segment file left a core idle while the other finished
(docs/perf/analytics.md). Only the files a cut falls in have their block
headers walked, on the driver.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence

from analytics.layout import ReadUnit
from analytics.segments import block_offsets, file_size


def partition_count(total_bytes: int, split_bytes: int, min_partitions: int) -> int:
    """How many partitions: at least ``min_partitions``, none much over ``split_bytes``,
    a multiple of ``min_partitions`` (equal tasks in whole rounds over the cores)."""
    assert split_bytes > 0 and min_partitions > 0, (split_bytes, min_partitions)
    count = max(min_partitions, -(-total_bytes // split_bytes))
    return -(-count // min_partitions) * min_partitions


def unit_bytes(unit: ReadUnit) -> int:
    end = unit.end if unit.end is not None else file_size(unit.path)
    return max(0, end - unit.start)


def equal_partitions(units: Sequence[ReadUnit], count: int) -> list[list[ReadUnit]]:
    """The units in order, cut into ``count`` (or fewer, if blocks are too few) non-empty
    partitions of about equal bytes; every cut is at a block start."""
    sizes = [unit_bytes(u) for u in units]
    bases = [0, *itertools.accumulate(sizes)]  # global position of each unit's first byte
    total = bases[-1]
    offsets: dict[str, list[int]] = {}
    cuts = sorted({_cut(units, bases, -(-k * total // count), offsets) for k in range(1, count)} - {0, total})
    bounds = [0, *cuts, total]
    out = [_slice(units, bases, a, b) for a, b in itertools.pairwise(bounds)]
    return [p for p in out if p]


def _cut(units: Sequence[ReadUnit], bases: list[int], target: int, offsets: dict[str, list[int]]) -> int:
    """The global position of the first block start at or past ``target`` (``offsets``
    caches each file's block offsets)."""
    i = bisect.bisect_right(bases, target) - 1
    if i >= len(units) or bases[i] == target:
        return min(target, bases[-1])
    unit = units[i]
    end = unit.start + bases[i + 1] - bases[i]
    want = unit.start + target - bases[i]
    if unit.path not in offsets:
        offsets[unit.path] = block_offsets(unit.path)
    for off in offsets[unit.path]:
        if want <= off < end:
            return bases[i] + off - unit.start
    return bases[i + 1]  # no block starts in the rest of this unit: cut at the next one


def _slice(units: Sequence[ReadUnit], bases: list[int], a: int, b: int) -> list[ReadUnit]:
    """The parts of the units between global positions ``a`` and ``b``."""
    out = []
    for unit, lo, hi in zip(units, bases, bases[1:], strict=False):
        s, e = max(a, lo), min(b, hi)
        if s < e:
            end = unit.end if e == hi else unit.start + e - lo
            out.append(dataclasses.replace(unit, start=unit.start + s - lo, end=end))
    return out
