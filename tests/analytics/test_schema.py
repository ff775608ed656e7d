"""The schema's nullability: NOT NULL only where every row has a value (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from analytics.batches import bad_block_batch
from analytics.layout import ReadUnit
from analytics.schema import NEVER_NULL, arrow_schema, check_not_null, ddl
from analytics.segments import BadBlock


def test_only_the_columns_every_row_has_are_declared_not_null() -> None:
    assert ddl(["queue", "time"]) == "`queue` STRING NOT NULL, `time` TIMESTAMP"
    assert arrow_schema(["queue", "time"], frozenset({"queue"})) == pa.schema(
        [pa.field("queue", pa.string(), nullable=False), pa.field("time", arrow_schema(["time"])[0].type)])
    check_not_null(frozenset(NEVER_NULL))
    with pytest.raises(ValueError, match="time"):
        check_not_null(frozenset({"queue", "time"}))


def test_a_corrupt_blocks_row_has_every_never_null_column(tmp_path: Path) -> None:
    unit = ReadUnit("h", "q", 0, "", str(tmp_path / "0.seg"))
    cols = [*sorted(NEVER_NULL), "time", "corrupt"]
    row = bad_block_batch(unit, BadBlock(44, "payload checksum mismatch", fatal=False), cols,
                          frozenset(NEVER_NULL))
    assert row.schema == arrow_schema(cols, frozenset(NEVER_NULL))
    [values] = row.to_pylist()
    assert all(values[c] is not None for c in NEVER_NULL) and values["time"] is None
