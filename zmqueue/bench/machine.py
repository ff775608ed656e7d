"""A one-line description of the machine a benchmark ran on."""

from __future__ import annotations

import os
import platform

import zmq


def machine_summary() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    return (f"{os.cpu_count()} CPUs ({cpu}){mem}, Linux {platform.release()}, "
            f"Python {platform.python_version()}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}")
