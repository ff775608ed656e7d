"""What a failed system call on a stream's files becomes: a zmqueue error
that names the file and says what to do.

A store raises these, never a bare OSError: the host turns them into error
replies (and keeps serving its other queues). The space errors are
:class:`DiskFull` (a standard queue's sender tries the partition's other
hosts); the others are :class:`Unavailable`.
"""

from __future__ import annotations

import errno
import resource
from pathlib import Path

from zmqueue.errors import DiskFull, Unavailable, ZmqueueError

SPACE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
"""Errors that mean "no room to write": the store refuses new messages
(DiskFull) until a write fits again."""
FD_ERRNOS = (errno.EMFILE, errno.ENFILE)
IN_THE_WAY_ERRNOS = (errno.ENOTDIR, errno.EEXIST)


def _name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def file_size_limit() -> int | None:
    """The process's file-size limit (RLIMIT_FSIZE, ``ulimit -f``) in bytes; None if unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def write_failed(path: Path, exc: OSError) -> DiskFull | None:
    """The DiskFull of a write to ``path`` refused for room; None for other errors."""
    if exc.errno == errno.EFBIG:
        limit = file_size_limit()
        size = f"{limit} bytes" if limit is not None else "its size limit"
        return DiskFull(
            f"cannot write {path}: the host's file-size limit (ulimit -f, RLIMIT_FSIZE; systemd "
            f"LimitFSIZE=) stops a segment file at {size}, and one block of this stream does not "
            "fit in a new segment either; freeing disk space does not help: raise the limit of the "
            "host process (or remove it) and restart the host",
            path=str(path), errno="EFBIG", limit_bytes=limit, stored=False)
    if exc.errno == errno.EDQUOT:
        return DiskFull(f"cannot write {path}: disk quota exceeded; raise the quota of the host's "
                        "user on that disk or free space in it", path=str(path), errno="EDQUOT",
                        stored=False)
    if exc.errno == errno.ENOSPC:
        return DiskFull(f"no space left to write {path} ({exc.strerror}); free space on that disk",
                        path=str(path), errno="ENOSPC", stored=False)
    return None


def in_the_way(path: Path) -> Path | None:
    """The first part of ``path`` that exists and is not a directory (a
    stray file where a directory must go), or None."""
    for p in (*reversed(path.parents), path):
        if p.exists() and not p.is_dir():
            return p
    return None


def open_failed(directory: Path, exc: OSError) -> ZmqueueError:
    """What opening the stream in ``directory`` (mkdir, lock, recovery scan,
    the active segment) failing with ``exc`` becomes."""
    where = exc.filename or directory
    what = f"cannot open the stream in {directory}: {exc.strerror or exc} ({_name(exc)}) at {where}"
    details = {"path": str(directory), "errno": _name(exc), "stored": False}
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"{what}: the disk (or its inodes: df -h, df -i) or the quota of the host's "
                        "user is used up; free space or inodes there", **details)
    if exc.errno in FD_ERRNOS:
        return Unavailable(f"{what}: the host ran out of file descriptors (each stream holds 2 or "
                           "more); raise the host's open-file limit (ulimit -n; systemd LimitNOFILE=) "
                           "and restart it, or move queues to other hosts", **details)
    if exc.errno in IN_THE_WAY_ERRNOS:
        stray = in_the_way(directory)
        if stray is not None:
            details["stray"] = str(stray)
            return Unavailable(f"{what}: {stray} is a file where the host needs a directory; move "
                               "that file out of the data directory (the host retries opening the "
                               "stream by itself)", **details)
    return Unavailable(f"{what}: check the data disk (mounted, writable, healthy) and the "
                       "permissions under the data directory", **details)
