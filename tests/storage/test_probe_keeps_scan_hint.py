"""has_visible() is a probe: it must not hide messages from the next receive."""

from __future__ import annotations

from pathlib import Path

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
