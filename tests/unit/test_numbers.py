"""Numbers inside names: '²' passes ``str.isdigit`` and ``int`` refuses it, so a
KV key, a stream id or a file name holding one raised ValueError where a bad
name was meant to be refused or skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.kvhealth import keep_last_good
from zmqueue.controlplane.writer_election import parse_lock_key
from zmqueue.dataplane.replication import parse_stream_id
from zmqueue.dataplane.storage.segment import list_segments
from zmqueue.errors import InvalidParameter
from zmqueue.numbers import digits


@pytest.mark.parametrize(("text", "most", "want"), [
    ("0", 6, 0), ("17", 6, 17), ("123456", 6, 123456), ("1234567", 6, None), ("", 6, None),
    ("\u00b2", 6, None), ("1\u00b2", 6, None), ("\u0661", 6, None), ("-1", 6, None), ("+1", 6, None),
    (" 1", 6, None), ("9" * 5000, 6, None), ("00000000000000000042", 20, 42),
])
def test_digits_reads_ascii_digits_only(text: str, most: int, want: int | None) -> None:
    assert digits(text, most) == want


def test_a_stream_id_with_a_non_ascii_digit_is_a_bad_parameter() -> None:
    for bad in ("q/\u00b2/node", f"q/{'9' * 5000}/node", "q//node"):
        with pytest.raises(InvalidParameter, match="bad stream id"):
            parse_stream_id(bad)
    assert parse_stream_id("q/3/node") == ("q", 3, "node")


def test_kv_keys_with_non_ascii_digits_are_reported_not_raised() -> None:
    assert parse_lock_key(f"{kv.PREFIX}leaders/q/\u00b2/node") is None
    key = kv.partition_key(kv.PartitionId("q", 0)).replace("/0", "/\u00b2")
    state, problems = kv.parse_tree([{"Key": key, "Value": b"{}", "CreateIndex": 1, "ModifyIndex": 1}])
    assert [p.key for p in problems] == [key]
    prev, _ = kv.parse_tree([])
    assert keep_last_good(prev, state, problems) is not None  # (raised ValueError)
    positions = [{"Key": f"{kv.POSITIONS_PREFIX}q/\u00b2/o/node", "Value": b"{}"}]
    assert kv.decode_stream_positions(positions) == {}


def test_segment_files_with_non_ascii_digits_are_not_segments(tmp_path: Path) -> None:
    (tmp_path / f"{'0' * 19}\u00b2.seg").write_bytes(b"")
    (tmp_path / f"{'0' * 19}1.seg").write_bytes(b"")
    assert list_segments(tmp_path) == [(1, tmp_path / f"{'0' * 19}1.seg")]
