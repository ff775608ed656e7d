"""A replicated record table from the wire is checked before it touches a store."""

from __future__ import annotations

import numpy as np
import pytest

from zmqueue.dataplane.storage.records import RECORD_DTYPE, RecordType
from zmqueue.dataplane.storage.replica import validate
from zmqueue.errors import InvalidParameter


def table(n: int = 10, first: int = 5) -> np.ndarray:
    t = np.zeros(n, RECORD_DTYPE)
    t["seq"] = np.arange(first, first + n)
    t["type"] = RecordType.MESSAGE
    t["body_len"] = 4
    t["data_off"] = np.arange(n) * 4
    return t


def test_a_well_formed_table_comes_back_as_rows() -> None:
    t = table()
    got = validate(t.tobytes(), bytes(40))
    assert got.dtype == RECORD_DTYPE and list(got["seq"]) == list(range(5, 15))
    with pytest.raises(ValueError, match="read-only"):
        got["seq"][0] = 0  # a view of the wire bytes: nothing may write through it


@pytest.mark.parametrize("n", [1, 2, 3])
def test_short_tables_are_accepted(n: int) -> None:
    assert len(validate(table(n).tobytes(), bytes(4 * n))) == n


@pytest.mark.parametrize("case, message", [
    ("empty", "not whole records"),
    ("torn", "not whole records"),
    ("gap", "not contiguous"),
    ("swapped", "not contiguous"),
    ("unknown type", "unknown type"),
    ("heap short", "outside its heap"),
])
def test_malformed_tables_are_refused_with_the_reason(case: str, message: str) -> None:
    t = table()
    heap = bytes(40)
    if case == "gap":
        t["seq"][5:] += 1
    elif case == "swapped":
        t["seq"][[3, 4]] = t["seq"][[4, 3]]
    elif case == "unknown type":
        t["type"][2] = 200
    elif case == "heap short":
        heap = bytes(39)
    raw = t.tobytes()
    if case == "empty":
        raw = b""
    elif case == "torn":
        raw = raw[:-1]
    with pytest.raises(InvalidParameter, match=message):
        validate(raw, heap)
