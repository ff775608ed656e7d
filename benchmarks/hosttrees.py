"""Host processes from another source tree, for benchmarks that compare an
old host with a new one in one invocation (``--host-tree LABEL=PATH``).

The client side always runs this tree's code; the host processes get the
other tree first on their path (``PYTHONPATH``) and not the working
directory (``PYTHONSAFEPATH``: ``python -m`` otherwise puts the current
directory, the checkout, ahead of it).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from zmqueue.localcluster import LocalCluster


def host_trees(ap: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, str | None]]:
    """(label, path) of this tree (labelled with its commit, path None) and
    of each ``LABEL=PATH`` in ``specs``; a bad spec is an argparse error."""
    from benchmarks.peers.writeup import code_commit

    trees: list[tuple[str, str | None]] = [(code_commit(), None)]
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not (Path(path) / "zmqueue" / "__init__.py").is_file():
            ap.error(f"--host-tree {spec!r}: expected LABEL=PATH of a source tree holding zmqueue/")
        trees.append((label, str(Path(path).resolve())))
    return trees


def start_cluster(work_dir: Path, host_tree: str | None, hosts: int = 1) -> LocalCluster:
    """A started LocalCluster whose hosts run ``host_tree``'s code (None:
    this tree's); raises RuntimeError if a host did not get that tree."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
    if host_tree is not None:
        os.environ["PYTHONPATH"] = host_tree
        os.environ["PYTHONSAFEPATH"] = "1"
    try:
        lc = LocalCluster(work_dir, hosts=hosts).start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if host_tree is not None:
        for h in lc.hosts:
            env = Path(f"/proc/{h.pid}/environ").read_bytes().split(b"\0")
            if f"PYTHONPATH={host_tree}".encode() not in env or b"PYTHONSAFEPATH=1" not in env:
                lc.stop()
                raise RuntimeError(f"host {h.pid} did not get the tree {host_tree} on its path")
    return lc
