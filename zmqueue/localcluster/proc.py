"""Start and stop child processes by pid, with their output in a log file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class ManagedProcess:
    """A child process whose stdout and stderr go to ``log_path``."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.found_exited: int | None = None
        """The exit status (negative: the signal) of a process that had
        already ended when ``stop`` was called, e.g. by a crash or a kill."""

    @property
    def pid(self) -> int:
        assert self.proc is not None, "process not started"
        return self.proc.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True,
            )
        finally:
            log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill9(self) -> None:
        """SIGKILL by pid and reap."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (SIGCONT first, in case it is stopped), wait, then SIGKILL.
        Then it checks by pid that the command is really gone, since Popen can
        take a child for exited when it is not (``poll`` reports 0 when
        ``waitpid`` fails with ECHILD) and it would be left running."""
        if self.proc is None:
            return None
        if not self.alive():
            self.found_exited = self.proc.poll()
        else:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            _wait_while(self.alive, timeout_s)
        if self.alive():
            self.kill9()
        if self.running_by_pid():
            self._stop_by_pid(timeout_s)
        return self.proc.poll()

    def running_by_pid(self) -> bool:
        """Whether the pid still runs this command (``/proc/<pid>/cmdline``
        starts with our argv; a zombie's is empty, another program's differs)."""
        if self.proc is None:
            return False
        try:
            cmdline = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes()
        except OSError:
            return False
        want = [a.encode() for a in self.argv]
        return cmdline.split(b"\0")[:len(want)] == want

    def _stop_by_pid(self, timeout_s: float) -> None:
        assert self.proc is not None
        pid = self.proc.pid
        for sig in (signal.SIGCONT, signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if _wait_while(self.running_by_pid, timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_while(self.running_by_pid, 10)

    def log_tail(self, max_bytes: int = 8000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-max_bytes:].decode("utf-8", "replace")


def _wait_while(cond: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``cond`` every 20 ms until it is false or ``timeout_s`` passed;
    whether it still holds."""
    deadline = time.monotonic() + timeout_s
    while cond():
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.02)
    return False
