"""Admission checks for new messages: disk space (the configured reserve, and
after a DiskFull), queue limits, and the size of one block."""

from __future__ import annotations

import os
import time
from pathlib import Path

from zmqueue.dataplane.storage.config import MIB, StorageConfig
from zmqueue.dataplane.storage.records import MAX_BLOCK_RAW
from zmqueue.errors import DiskFull, InvalidParameter, QueueLimitReached

SPACE_HEADROOM_BYTES = 64 << 10
SPACE_CHECK_S = 0.1
"""How long a ``statvfs`` reading of the free space stands (counted down by
what is admitted meanwhile) before :class:`FreeSpace` reads it again."""


def disk_free(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on the disk holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def require_space(directory: Path, size: int) -> None:
    """After a DiskFull, refuse appends until ``statvfs`` shows room for ``size``."""
    if disk_free(directory) < 2 * size + SPACE_HEADROOM_BYTES:
        raise DiskFull(f"disk holding {directory} is full; free space on it", path=str(directory),
                       stored=False)


class FreeSpace:
    """The reserve of ``min_free`` bytes kept free on the disk holding
    ``directory``: :meth:`admit` refuses new messages (DiskFull) that would cut
    into it. ``statvfs`` is read at most every ``SPACE_CHECK_S``; in between,
    the reading is counted down by the bytes admitted."""

    def __init__(self, directory: Path, min_free: int) -> None:
        self.directory, self.min_free = directory, min_free
        self.free = 0
        self._read_at = -SPACE_CHECK_S

    def admit(self, size: int) -> None:
        now = time.monotonic()
        if now - self._read_at >= SPACE_CHECK_S:
            self.free, self._read_at = disk_free(self.directory), now
        if self.free - size < self.min_free:
            where = (f"disk holding {self.directory} has {self.free / MIB:.1f} MiB free, less than"
                     if self.free < self.min_free else
                     f"storing these {size} bytes would leave {(self.free - size) / MIB:.1f} MiB free on "
                     f"the disk holding {self.directory}, less than")
            raise DiskFull(
                f"{where} the {self.min_free / MIB:.1f} MiB kept free for receives and deletes "
                "(min_free_bytes, a host's --min-free-disk-mb): new messages are refused until space "
                "is freed there; consumers can still receive and delete",
                path=str(self.directory), free_bytes=self.free, min_free_bytes=self.min_free,
                size_bytes=size, stored=False)
        self.free -= size


def check_limits(
    config: StorageConfig, stored: int, stored_bytes: int, staged_bytes: int, n: int, size: int
) -> None:
    """Raise if ``n`` more messages of ``size`` payload bytes may not be staged."""
    limit = config.max_messages
    if limit is not None and stored + n > limit:
        raise QueueLimitReached(
            f"queue limit max_messages={limit} reached ({stored} stored): receive and delete messages, "
            "or raise the queue's max_messages (set_attributes, or zmqueue queue set --max-messages)",
            limit="max_messages",
            value=limit,
        )
    limit = config.max_bytes
    if limit is not None and stored_bytes + size > limit:
        raise QueueLimitReached(
            f"queue limit max_bytes={limit} reached ({stored_bytes} bytes stored): receive and delete "
            "messages, or raise the limit",
            limit="max_bytes",
            value=limit,
        )
    if staged_bytes + size > MAX_BLOCK_RAW // 2:
        raise InvalidParameter("too much uncommitted data: commit() first", size=size)
