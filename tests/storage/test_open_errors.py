"""A stream's store that cannot be opened (a stray file where its directory
goes, no space or inodes, out of file descriptors, a file-size limit) raises
a zmqueue error naming the path and what to do, and leaves nothing open: it
opens once the cause is gone. A bare OSError here used to end the host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.storage.test_crash import ROOT
from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.errors import DiskFull, Unavailable

CONFIG = StorageConfig(fsync="never")


def test_a_file_where_the_stream_directory_goes_is_named_and_the_store_opens_once_it_is_moved(
        tmp_path: Path) -> None:
    stream = tmp_path / "queues" / "q" / "0" / "h1"
    stream.parent.mkdir(parents=True)
    stream.write_text("not a directory")  # mkdir: File exists
    with pytest.raises(Unavailable) as err:
        PartitionStore.open(stream, CONFIG, now_ms=1)
    text = str(err.value)
    assert f"{stream} is a file where the host needs a directory" in text, text
    assert "move that file out of the data directory" in text and "(EEXIST)" in text, text
    stream.unlink()
    with PartitionStore.open(stream, CONFIG, now_ms=1) as store:
        assert store.stats(1)["total"] == 0


def test_a_file_where_a_parent_directory_goes_is_the_one_named(tmp_path: Path) -> None:
    stray = tmp_path / "queues" / "q"
    stray.parent.mkdir()
    stray.write_text("not a directory")  # mkdir below it: Not a directory
    with pytest.raises(Unavailable) as err:
        PartitionStore.open(stray / "0" / "h1", CONFIG, now_ms=1)
    assert f"{stray} is a file where the host needs a directory" in str(err.value), str(err.value)
    assert err.value.details["stray"] == str(stray) and err.value.details["errno"] == "ENOTDIR"


def test_a_disk_out_of_inodes_is_disk_full_saying_so(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,nr_inodes=8", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        opened, error = [], None
        for i in range(10):
            try:
                opened.append(PartitionStore.open(mount / f"s{i}", CONFIG, now_ms=1))
            except DiskFull as exc:
                error = exc
                break
        assert error is not None, "the inodes never ran out"
        text = str(error)
        assert "No space left on device (ENOSPC)" in text and "df -i" in text, text
        assert error.details["path"] == str(mount / f"s{len(opened)}") and error.details["stored"] is False
        for s in opened:
            s.close()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _child(scenario: str, directory: Path) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "tests.storage.limit_child", scenario, str(directory)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    return out


def test_out_of_file_descriptors_names_the_open_file_limit_and_leaves_nothing_open(tmp_path: Path) -> None:
    print(_child("nofile", tmp_path))


def test_a_file_size_limit_rolls_segments_and_a_block_past_it_is_refused_naming_the_limit(
        tmp_path: Path) -> None:
    """``ulimit -f`` below the segment size: the write that hits it goes to a
    new segment (a host used to refuse every send from then on, saying to free
    space on a disk with 63 GB free); only a block larger than the limit is
    refused, with a message that says to raise the limit."""
    print(_child("fsize", tmp_path / "p0"))
