"""RECEIVE ``dref`` validation (``service._delete_refs``): one stream's
(seq, receive count) columns, plain ints only, refused with one clear error
otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from zmqueue.dataplane.service import _delete_refs
from zmqueue.errors import InvalidParameter
from zmqueue.protocol import MAX_BATCH


def test_a_valid_dref_comes_back_as_its_three_columns() -> None:
    seqs, counts = list(range(10, 110)), [1] * 100
    assert _delete_refs({"dref": ["h1", seqs, counts]}) == ("h1", seqs, counts)
    assert _delete_refs({"dref": ["h1", [0], [2**63 - 1]]}) == ("h1", [0], [2**63 - 1])


@pytest.mark.parametrize("bad", [
    None, "x", ["h1", [1], [1], 0], [7, [1], [1]], ["h1", (1,), [1]],
    ["h1", [], []], ["h1", [1], [1, 2]], ["h1", list(range(MAX_BATCH + 1)), [1] * (MAX_BATCH + 1)],
    ["h1", [True], [1]], ["h1", [1], [False]],  # bool is an int subclass, not an int here
    ["h1", [1.0], [1]], ["h1", [1], ["1"]], ["h1", [1, None], [1, 1]],
    ["h1", [-1], [1]], ["h1", [1], [-1]], ["h1", [2**63], [1]], ["h1", [1], [2**63]],
])
def test_a_malformed_dref_is_refused_with_what_it_must_be(bad: Any) -> None:
    with pytest.raises(InvalidParameter, match=r"dref must be \[origin, seqs, receive counts\]") as err:
        _delete_refs({"dref": bad} if bad is not None else {})
    assert err.value.details.get("field") == "dref"
