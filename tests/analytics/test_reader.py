"""The segment reader without Spark, on logs written by the storage engine."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import msgpack
import pytest

from analytics.batches import read_unit
from analytics.blob import decode_blob
from analytics.layout import find_host_dirs, plan_units, segment_files
from analytics.options import parse_options
from analytics.partitions import equal_partitions
from analytics.reader import read_options, read_table
from analytics.segments import (
    GONE,
    HEADER_BYTES,
    RECORD_DTYPE,
    BadBlock,
    BlockHeader,
    block_offsets,
    decode_payload,
    file_size,
    iter_blocks,
    lz4_decompress,
)
from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig

T0 = 1_767_225_600_000


def write_log(host_dir: Path, queue: str = "q", blocks: int = 4, per_block: int = 5,
              node: str | None = "node-a") -> list[bytes]:
    host_dir.mkdir(parents=True, exist_ok=True)
    if node:
        (host_dir / "host.json").write_text(json.dumps({"node": node, "cluster": "c", "pid": 1}))
    store = PartitionStore.open(host_dir / "queues" / queue / "0", StorageConfig(fsync="never"), now_ms=T0)
    ids = []
    for b in range(blocks):
        msgs = []
        for k in range(per_block):
            mid = uuid.uuid4().bytes
            ids.append(mid)
            blob = msgpack.packb({"a": {"k": k, "b": b"\x01"}, "g": "grp", "cid": "alice"}) if k == 0 else b""
            msgs.append(NewMessage(mid, b"x" * (k + 1), blob))
        store.append(msgs, T0 + b * 1000)
        store.commit()
    store.close()
    return ids


def segment_of(host_dir: Path, queue: str = "q") -> Path:
    [seg] = sorted((host_dir / "queues" / queue / "0").glob("*.seg"))
    return seg


def test_every_record_is_read_with_host_queue_ids_and_times(tmp_path: Path) -> None:
    ids = write_log(tmp_path / "h1")
    t = read_table([tmp_path]).to_pylist()
    assert [r["seq"] for r in t] == list(range(1, 21))
    assert {r["host"] for r in t} == {"node-a"} and {r["queue"] for r in t} == {"q"}
    assert [r["message_id"] for r in t] == [i.hex() for i in ids]
    assert int(t[5]["time"].timestamp() * 1000) == T0 + 1000
    assert [r["payload_size"] for r in t[:5]] == [1, 2, 3, 4, 5]
    first = t[0]
    assert (first["group_id"], first["client_id"], dict(first["attributes"])) == ("grp", "alice",
                                                                                  {"k": "0", "b": "01"})
    assert t[1]["client_id"] is None and t[1]["attributes"] is None
    assert all(r["corrupt"] is None for r in t)


def test_a_host_without_host_json_is_named_after_its_directory(tmp_path: Path) -> None:
    write_log(tmp_path / "hostdir", node=None)
    assert find_host_dirs([tmp_path]) == [(tmp_path / "hostdir").resolve()]
    assert set(read_table([tmp_path], ["host"]).column("host").to_pylist()) == {"hostdir"}


def test_options_select_columns_time_range_types_and_payload(tmp_path: Path) -> None:
    write_log(tmp_path / "h1")
    t = read_table([tmp_path], ["seq"], since=str(T0 + 1000), until=str(T0 + 3000))
    assert t.column("seq").to_pylist() == list(range(6, 16))
    assert read_table([tmp_path], ["seq"], types="DELETE").num_rows == 0
    p = read_table([tmp_path], ["seq", "payload"], payload="true")
    assert p.column("payload").to_pylist()[:2] == [b"x", b"xx"]


def test_block_range_splits_read_the_same_records_as_whole_files(tmp_path: Path) -> None:
    write_log(tmp_path / "h1")
    units = plan_units([tmp_path], split_bytes=1)
    assert len(units) == 4 and units[0].start == 0 and units[-1].end is None
    from analytics.batches import ReadOptions, read_unit

    seqs = [s for u in units for b in read_unit(u, ReadOptions(["seq"])) for s in b.column("seq").to_pylist()]
    assert seqs == list(range(1, 21))


def test_a_corrupt_block_is_reported_and_skipped_and_the_rest_is_read(tmp_path: Path) -> None:
    write_log(tmp_path / "h1")
    seg = segment_of(tmp_path / "h1")
    offsets = [b.header.offset for b in iter_blocks(seg)]  # type: ignore[union-attr]
    with open(seg, "r+b") as f:
        f.seek(offsets[1] + HEADER_BYTES + 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    t = read_table([tmp_path], ["seq", "block_offset", "corrupt"]).to_pylist()
    bad = [r for r in t if r["corrupt"]]
    assert bad == [{"seq": None, "block_offset": offsets[1], "corrupt": "payload checksum mismatch"}]
    assert [r["seq"] for r in t if not r["corrupt"]] == [*range(1, 6), *range(11, 21)]


def test_decompression_must_give_exactly_raw_len_bytes() -> None:
    import lz4.block

    raw = bytes(range(256)) * 40 + b"tail" * 7
    comp = lz4.block.compress(raw, store_size=False)
    assert bytes(lz4_decompress(comp, len(raw))) == raw
    with pytest.raises(ValueError, match=f"decompressed {len(raw)} bytes, header says {len(raw) + 5}"):
        lz4_decompress(comp, len(raw) + 5)  # stream shorter than the header says
    for bad_comp, size in ((comp, len(raw) - 1), (comp[:-3], len(raw)), (b"\xff" * 64, len(raw)), (b"", 88)):
        with pytest.raises(ValueError, match="lz4 decompression failed"):
            lz4_decompress(bad_comp, size)


def test_a_truncated_tail_and_a_bad_header_end_the_file_with_a_report(tmp_path: Path) -> None:
    write_log(tmp_path / "h1")
    seg = segment_of(tmp_path / "h1")
    os.truncate(seg, os.path.getsize(seg) - 7)
    t = read_table([tmp_path], ["seq", "corrupt"]).to_pylist()
    assert [r["seq"] for r in t if not r["corrupt"]] == list(range(1, 16))
    [reason] = [r["corrupt"] for r in t if r["corrupt"]]
    assert reason.startswith("truncated payload")
    with open(seg, "r+b") as f:
        f.write(b"XXXX")
    t = read_table([tmp_path], ["seq", "corrupt"]).to_pylist()
    assert t == [{"seq": None, "corrupt": "header checksum mismatch"}]


def test_a_foreign_blob_decodes_to_nothing_known() -> None:
    assert decode_blob(b"\xc1not msgpack").group_id is None
    assert decode_blob(msgpack.packb([1, 2])).attributes is None
    assert decode_blob(msgpack.packb({"src": "q", "rc": 3})).carried_receive_count == 3


def test_an_unknown_column_or_record_type_is_refused(tmp_path: Path) -> None:
    write_log(tmp_path / "h1")
    with pytest.raises(ValueError, match="unknown record types"):
        read_table([tmp_path], ["seq"], types="NOPE")
    with pytest.raises(KeyError):
        read_table([tmp_path], ["nope"])
    with pytest.raises(FileNotFoundError):
        read_table([tmp_path / "missing"], ["seq"])


def _seal(key: bytes, queue: str, data: bytes, mid: bytes, part: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    aad = b"zmq-at-rest|" + queue.encode() + b"|" + mid + part
    return bytes((0xE5, 1)) + nonce + AESGCM(key).encrypt(nonce, data, aad)


def test_sealed_payloads_are_read_only_with_the_key(tmp_path: Path) -> None:
    import base64

    key = os.urandom(32)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "secret.key").write_text(f"1:{base64.b64encode(key).decode()}\n")
    host = tmp_path / "data" / "h1"
    store = PartitionStore.open(host / "queues" / "secret" / "0", StorageConfig(fsync="never"), now_ms=T0)
    mid = uuid.uuid4().bytes
    blob = msgpack.packb({"g": "grp", "a": {"k": "v"}})
    store.append([NewMessage(mid, _seal(key, "secret", b"hello", mid, b"b"),
                             _seal(key, "secret", blob, mid, b"a"))], T0)
    store.commit()
    store.close()
    cols = ["encrypted", "payload_size", "group_id", "payload"]
    [locked] = read_table([tmp_path / "data"], cols, payload="true").to_pylist()
    assert locked == {"encrypted": True, "payload_size": 5, "group_id": None, "payload": None}
    keys = str(tmp_path / "keys")
    [opened] = read_table([tmp_path / "data"], cols, payload="true", keyDir=keys).to_pylist()
    assert opened == {"encrypted": True, "payload_size": 5, "group_id": "grp", "payload": b"hello"}


def test_small_blocks_are_combined_into_bigger_batches_in_log_order(tmp_path: Path) -> None:
    from analytics.reader import iter_batches

    write_log(tmp_path / "h1", blocks=6, per_block=5)
    assert [b.num_rows for b in iter_batches([tmp_path], ["seq"])] == [30]
    assert [b.num_rows for b in iter_batches([tmp_path], ["seq"], batchRows="12")] == [15, 15]
    assert [b.num_rows for b in iter_batches([tmp_path], ["seq"], batchRows="1")] == [5] * 6
    seg = segment_of(tmp_path / "h1")
    offsets = [b.header.offset for b in iter_blocks(seg)]  # type: ignore[union-attr]
    with open(seg, "r+b") as f:  # corrupt the third block's payload
        f.seek(offsets[2] + HEADER_BYTES + 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    batches = list(iter_batches([tmp_path], ["seq", "corrupt"]))
    assert [(b.num_rows, b.column("corrupt").null_count) for b in batches] == [(10, 10), (1, 0), (15, 15)]
    seqs = [s for b in batches for s in b.column("seq").to_pylist()]
    assert seqs == [*range(1, 11), None, *range(16, 31)]
    with pytest.raises(ValueError, match="batchRows"):
        list(iter_batches([tmp_path], ["seq"], batchRows="0"))


def _payload(records: list[tuple[int, int, int]], heap: bytes) -> tuple[BlockHeader, bytes]:
    import crc32c
    import lz4.block
    import numpy as np

    table = np.zeros(len(records), RECORD_DTYPE)
    table["type"], table["rec_version"], table["seq"] = 1, 1, np.arange(1, len(records) + 1)
    for i, (off, body, attr) in enumerate(records):
        table[i]["data_off"], table[i]["body_len"], table[i]["attr_len"] = off, body, attr
    raw = table.tobytes() + heap
    comp = lz4.block.compress(raw, store_size=False)
    return BlockHeader(0, len(records), 1, len(records), len(raw), len(comp), crc32c.crc32c(comp)), comp


def test_heap_bounds_are_checked_per_record() -> None:
    # the largest offset, body and attributes belong to different records: every record fits
    header, comp = _payload([(0, 10, 0), (10, 2, 8), (20, 0, 0)], b"h" * 20)
    assert len(decode_payload(header, comp).table) == 3
    header, comp = _payload([(0, 10, 0), (10, 2, 9)], b"h" * 20)
    with pytest.raises(ValueError, match="past the heap"):
        decode_payload(header, comp)


def test_record_flags_say_whether_a_payload_is_sealed_and_old_logs_are_guessed(tmp_path: Path) -> None:
    """A plain body may start with 0xE5 (CJK text in UTF-8 does: 常 is E5 B8 B8), the
    byte sealed payloads start with. A host's records say whether their queue seals
    (FLAG_SEAL_KNOWN, FLAG_SEALED); records without the flags (older logs, the engine
    alone) are still guessed from the first byte."""
    from zmqueue.dataplane.storage.records import FLAG_SEAL_KNOWN, FLAG_SEALED

    text = "常见问题 这是一个很长的普通消息 不是加密的".encode()
    assert text[0] == 0xE5 and len(text) >= 30
    cols = ["encrypted", "payload_size", "payload"]
    for name, flags, encrypted in (("plain", FLAG_SEAL_KNOWN, False), ("old", 0, True),
                                   ("sealed", FLAG_SEAL_KNOWN | FLAG_SEALED, True)):
        host = tmp_path / name / "h1"
        cfg = StorageConfig(fsync="never", record_flags=flags)
        store = PartitionStore.open(host / "queues" / name / "0", cfg, now_ms=T0)
        store.append([NewMessage(uuid.uuid4().bytes, text, b"")], T0)
        store.commit()
        store.close()
        [row] = read_table([tmp_path / name], cols, payload="true").to_pylist()
        assert row["encrypted"] is encrypted, name
        if not encrypted:
            assert row == {"encrypted": False, "payload_size": len(text), "payload": text}


def test_a_takeover_record_reads_as_epoch_with_no_message(tmp_path: Path) -> None:
    """A writer's record of its epoch (RecordType.EPOCH, docs/SEGMENT_FORMAT.md) is a
    record type of its own, selectable by name, and carries no message."""
    host = tmp_path / "h1"
    write_log(host, blocks=1, per_block=2)
    store = PartitionStore.open(host / "queues" / "q" / "0", StorageConfig(fsync="never"), now_ms=T0)
    store.epoch = 7
    store.mark_epoch(T0 + 5)
    store.close()
    t = read_table([tmp_path], ["seq", "record_type", "epoch", "message_id", "payload_size"]).to_pylist()
    assert [(r["seq"], r["record_type"]) for r in t] == [(1, "MESSAGE"), (2, "MESSAGE"), (3, "EPOCH")]
    assert (t[2]["epoch"], t[2]["payload_size"]) == (7, 0)
    assert read_table([tmp_path], ["seq"], types="EPOCH").column("seq").to_pylist() == [3]



def test_a_segment_compacted_away_while_the_job_runs_is_one_corrupt_row_not_a_failed_job(
        tmp_path: Path) -> None:
    """A running host's compaction (segments roll by age since the thirty-seventh
    session, so it removes files often) can remove a file between the job's
    listing and its read: the other files are read, and the gone one is one row
    saying so (the corruption job lists it), instead of a FileNotFoundError."""
    host = tmp_path / "h1"
    (host / "queues").mkdir(parents=True)
    (host / "host.json").write_text(json.dumps({"node": "node-a", "cluster": "c", "pid": 1}))
    config = StorageConfig(fsync="never", segment_bytes_max=4096)
    store = PartitionStore.open(host / "queues" / "q" / "0", config, now_ms=T0)
    for i in range(12):  # random bodies: each block ~1 KiB, files roll every few blocks
        store.append([NewMessage(uuid.uuid4().bytes, os.urandom(1000))], T0 + i)
        store.commit()
    store.close()
    units = plan_units([tmp_path])
    assert len(units) >= 3
    gone = units[1].path
    lost = {int(s) for b in iter_blocks(gone) if not isinstance(b, BadBlock) for s in b.table["seq"]}
    os.unlink(gone)
    assert block_offsets(gone) == [] and file_size(gone) == 0
    rows = [r for u in units for b in read_unit(u, read_options(parse_options({"paths": str(tmp_path)})))
            for r in b.to_pylist()]
    assert [(r["segment"], r["corrupt"]) for r in rows if r["corrupt"]] == [(os.path.basename(gone), GONE)]
    assert [r["seq"] for r in rows if not r["corrupt"]] == sorted(set(range(1, 13)) - lost)
    assert lost
    assert [seg for *_, seg in segment_files(host)] == [Path(u.path) for u in units if u.path != gone]
    assert list(segment_files(tmp_path / "no-such-host")) == []  # (a directory gone meanwhile)


def test_a_segment_file_missing_between_two_others_is_a_corrupt_row_naming_the_gap(tmp_path: Path) -> None:
    """(A stream's files were read one after another whatever their seqs: a
    file lost in the middle left a silent hole in the job's records, where the
    engine's recovery ends the log before it.) The gap is one corrupt row on
    the file before it; a complete log has none, split into ranges or not."""
    host = tmp_path / "h1"
    (host / "queues").mkdir(parents=True)
    (host / "host.json").write_text(json.dumps({"node": "node-a", "cluster": "c", "pid": 1}))
    store = PartitionStore.open(host / "queues" / "q" / "0",
                                StorageConfig(fsync="never", segment_bytes_max=4096), now_ms=T0)
    for i in range(12):  # random bodies: each block ~1 KiB, files roll every few blocks
        store.append([NewMessage(uuid.uuid4().bytes, os.urandom(1000))], T0 + i)
        store.commit()
    store.close()
    opts = read_options(parse_options({"paths": str(tmp_path)}))

    def rows(split_bytes: int, parts: int = 0) -> list[dict[str, object]]:
        units = plan_units([tmp_path], split_bytes=split_bytes)
        if parts:  # (Spark's minPartitions cuts units at block starts)
            units = [u for p in equal_partitions(units, parts) for u in p]
        return [r for u in units for b in read_unit(u, opts) for r in b.to_pylist()]

    assert [r["seq"] for r in rows(1 << 20)] == list(range(1, 13))
    assert [r["seq"] for r in rows(2048)] == list(range(1, 13))
    assert [r["seq"] for r in rows(1 << 20, parts=7)] == list(range(1, 13))
    files = [seg for *_, seg in segment_files(host)]
    assert len(files) >= 3
    before_ends = max(int(s) for b in iter_blocks(files[0]) if not isinstance(b, BadBlock)
                      for s in b.table["seq"])
    os.unlink(files[1])
    for split in (1 << 20, 2048):
        got = rows(split)
        [bad] = [r for r in got if r["corrupt"]]
        assert bad["segment"] == files[0].name and bad["seq"] is None
        assert (f"next segment file starts at seq {int(files[2].stem)}, this one ends at seq {before_ends}"
                in str(bad["corrupt"]))
        assert {r["seq"] for r in got if not r["corrupt"]} == set(range(1, 13)) - set(
            range(before_ends + 1, int(files[2].stem)))


def test_two_copies_of_one_hosts_log_are_two_replicas_and_dirs_named_seg_are_skipped(
        tmp_path: Path) -> None:
    """(A live directory read beside a copy of it had both copies named after
    the one node, so the counting jobs' one_replica kept both: every count
    doubled. A directory named like a segment file failed the read.)"""
    import shutil

    live = tmp_path / "live" / "n1"
    write_log(live, node="n1", blocks=1, per_block=1)
    shutil.copytree(live, tmp_path / "backup" / "n1-copy")
    (live / "queues" / "q" / "0" / "00000000000000000099.seg").mkdir()
    units = plan_units([tmp_path])
    assert sorted({u.host for u in units}) == sorted([f"n1@{live.resolve()}",
                                                     f"n1@{(tmp_path / 'backup' / 'n1-copy').resolve()}"])
    assert all(Path(u.path).is_file() for u in units)
    assert [u.host for u in plan_units([live])] == ["n1"], "a node read once keeps its plain name"
