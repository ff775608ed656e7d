"""Admission checks for new messages: disk space after a DiskFull, queue limits,
and the size of one block."""

from __future__ import annotations

import os
from pathlib import Path

from zmqueue.dataplane.storage.config import StorageConfig
from zmqueue.dataplane.storage.records import MAX_BLOCK_RAW
from zmqueue.errors import DiskFull, InvalidParameter, QueueLimitReached

SPACE_HEADROOM_BYTES = 64 << 10


def require_space(directory: Path, size: int) -> None:
    """After a DiskFull, refuse appends until ``statvfs`` shows room for ``size``."""
    st = os.statvfs(directory)
    if st.f_bavail * st.f_frsize < 2 * size + SPACE_HEADROOM_BYTES:
        raise DiskFull(f"disk holding {directory} is full; free space on it", path=str(directory))


def check_limits(
    config: StorageConfig, stored: int, stored_bytes: int, staged_bytes: int, n: int, size: int
) -> None:
    """Raise if ``n`` more messages of ``size`` payload bytes may not be staged."""
    limit = config.max_messages
    if limit is not None and stored + n > limit:
        raise QueueLimitReached(
            f"queue limit max_messages={limit} reached ({stored} stored)",
            limit="max_messages",
            value=limit,
        )
    limit = config.max_bytes
    if limit is not None and stored_bytes + size > limit:
        raise QueueLimitReached(
            f"queue limit max_bytes={limit} reached ({stored_bytes} bytes stored)",
            limit="max_bytes",
            value=limit,
        )
    if staged_bytes + size > MAX_BLOCK_RAW // 2:
        raise InvalidParameter("too much uncommitted data: commit() first", size=size)
