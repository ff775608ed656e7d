"""Disk-full scenario, run in a child process whose file size is capped with
RLIMIT_FSIZE (SIGXFSZ ignored, so writes fail with EFBIG).  Used when a tmpfs
cannot be mounted.  Exits 0 on success; prints what it checked.
Usage: python -m tests.storage.disk_full_child DIR
"""

from __future__ import annotations

import resource
import signal
import sys

from tests.storage.disk_full_scenario import run_scenario


def main() -> None:
    directory = sys.argv[1]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, hard))

    def free_space() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))

    print(run_scenario(directory, free_space), flush=True)


if __name__ == "__main__":
    main()
