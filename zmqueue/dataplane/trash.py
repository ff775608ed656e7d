"""Removing stream directories and segment files off the request loop.

Deleting a queue (or wiping a diverged copy) removes its streams' segment
files, and so does compaction (a segment whose messages are all gone), and
unlinking them takes time: about 0.2 s per GiB on this machine's ext4 (12 ms
for one 64 MiB segment), which the host's request loop would spend with
every other queue on the host waiting. Instead the directory or file is
renamed into the trash (one ``rename`` on the same file system: the data
dir's ``trash/``) at once, and a background thread deletes it. What a host
stopped before it was deleted is deleted after the host's next start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections import deque
from pathlib import Path

log = logging.getLogger(__name__)


class Trash:
    """The trash directory ``path`` (made on first use) and the thread that
    empties it (started while there is something to delete)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pending: deque[Path] = deque()
        self._running = False
        if path.is_dir():
            for left in sorted(path.iterdir()):  # a host stopped before deleting them
                self._put(left)

    def discard(self, path: Path) -> None:
        """Move ``path`` (a directory or a file, if it exists) out of its
        place now; delete it in the background."""
        if not path.exists():
            return
        target = self.path / uuid.uuid4().hex
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            os.rename(path, target)
        except OSError as exc:
            log.warning("could not move %s into %s (%s); deleting it in place", path, self.path, exc)
            _delete(path)
            return
        self._put(target)

    def idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until nothing is left to delete; whether so."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._running:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _put(self, path: Path) -> None:
        with self._lock:
            self._pending.append(path)
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name="zmqueue-trash", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._running = False
                    return
                path = self._pending.popleft()
            _delete(path)
            if path.exists():
                log.warning("could not delete %s; the next start of this host tries again", path)


def _delete(path: Path) -> None:
    """Delete a directory tree or a file; an error leaves it (the caller
    checks) and never ends the trash's thread."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
