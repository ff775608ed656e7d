"""has_visible() is a probe: it must not hide messages from the next receive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig


def test_probing_for_a_visible_message_does_not_hide_it_from_a_later_receive(tmp_path: Path) -> None:
    s = PartitionStore.open(tmp_path, StorageConfig(), now_ms=1000)
    s.append([NewMessage(b"x" * 16, b"hi")], 1000)
    s.commit()
    assert len(s.receive(10, 1000, 1000)[0]) == 1  # in flight until 2000
    assert s.receive(10, 1500, 1000)[0] == []
    assert s.has_visible(2100) and s.has_visible(2600)
    [again] = s.receive(10, 2600, 1000)[0]
    assert again.receive_count == 2
    s.close()


@pytest.mark.parametrize("fifo", [False, True])
def test_a_cached_no_turns_into_yes_when_a_deadline_passes(tmp_path: Path, fifo: bool) -> None:
    s = PartitionStore.open(tmp_path, StorageConfig(fifo=fifo), now_ms=1000)
    s.append_batch([b"a", b"b"], 1000, delay_ms=np.array([500, 0]), group_hashes=np.array([1, 2], np.uint64))
    [got] = s.receive(10, 1000, 300)[0]  # b in flight until 1300; a delayed until 1500
    assert got.body == b"b"
    version = s.ring.version
    assert not s.has_visible(1100) and not s.has_visible(1299)
    assert s.ring.version == version  # probes change nothing
    assert s.has_visible(1300)  # b's deadline passed: no slot changed, the cached "no" expired
    assert s.has_visible(1600)
    again, _ = s.receive(10, 1600, 300)
    assert [d.body for d in again] == [b"a", b"b"]
    assert not s.has_visible(1601)
    s.close()
