"""Cutting a log into equal partitions (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.batches import ReadOptions, read_unit
from analytics.layout import ReadUnit, plan_units
from analytics.partitions import equal_partitions, partition_count, unit_bytes
from analytics.segments import block_offsets
from tests.analytics.test_reader import write_log


def log_with_three_queues(root: Path) -> list[ReadUnit]:
    for q, blocks in (("a", 7), ("b", 2), ("c", 11)):
        write_log(root / "h1", queue=q, blocks=blocks, per_block=9)
    return plan_units([root])


def seqs(units: list[ReadUnit]) -> list[tuple[str, int]]:
    opts = ReadOptions(["queue", "seq"])
    return [(q, s) for u in units for b in read_unit(u, opts)
            for q, s in zip(b.column("queue").to_pylist(), b.column("seq").to_pylist(), strict=True)]


def test_the_partition_count_is_a_multiple_of_the_minimum_and_keeps_partitions_under_split_bytes() -> None:
    assert partition_count(288, split_bytes=128, min_partitions=2) == 4  # 3 would leave a core idle
    assert partition_count(288, split_bytes=256, min_partitions=2) == 2
    assert partition_count(10, split_bytes=128, min_partitions=3) == 3
    assert partition_count(0, split_bytes=128, min_partitions=1) == 1


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8])
def test_equal_partitions_read_every_record_once_in_log_order(tmp_path: Path, count: int) -> None:
    units = log_with_three_queues(tmp_path)
    parts = equal_partitions(units, count)
    assert len(parts) == count
    assert seqs([u for p in parts for u in p]) == seqs(units)
    for p in parts:  # every piece starts on a block (or at its file's start)
        for u in p:
            assert u.start == 0 or u.start in block_offsets(u.path)


def test_equal_partitions_differ_by_at_most_about_one_block(tmp_path: Path) -> None:
    units = log_with_three_queues(tmp_path)
    block = max(b - a for u in units for a, b in zip(block_offsets(u.path), block_offsets(u.path)[1:],
                                                      strict=False))
    sizes = [sum(unit_bytes(u) for u in p) for p in equal_partitions(units, 4)]
    assert max(sizes) - min(sizes) <= 2 * block, sizes


def test_more_partitions_than_blocks_leaves_none_empty(tmp_path: Path) -> None:
    write_log(tmp_path / "h1", blocks=2, per_block=3)
    units = plan_units([tmp_path])
    parts = equal_partitions(units, 10)
    assert 1 <= len(parts) <= 2 and all(parts)
    assert seqs([u for p in parts for u in p]) == seqs(units)


def test_an_empty_log_has_no_partitions(tmp_path: Path) -> None:
    (tmp_path / "h1" / "queues").mkdir(parents=True)
    assert equal_partitions(plan_units([tmp_path]), 4) == []
