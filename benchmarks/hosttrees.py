"""Host processes from another source tree, for benchmarks that compare an
old host with a new one in one invocation (``--host-tree LABEL=PATH``).

The client side always runs this tree's code; the host processes get the
other tree first on their path (``PYTHONPATH``) and not the working
directory (``PYTHONSAFEPATH``: ``python -m`` otherwise puts the current
directory, the checkout, ahead of it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
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


def tree_env(tree: str) -> dict[str, str]:
    """What a process needs in its environment to run ``tree``'s code."""
    return {"PYTHONPATH": tree, "PYTHONSAFEPATH": "1"}


@contextlib.contextmanager
def running_cluster(host_tree: str | None, hosts: int = 1,
                    prefix: str = "zmqueue-bench-") -> Iterator[LocalCluster]:
    """A LocalCluster (Consul dev agent and ``hosts`` hosts) in a temporary
    directory, its hosts running ``host_tree``'s code (None: this tree's),
    stopped by pid when the block ends; RuntimeError if a host did not get
    that tree."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
        if host_tree is not None:
            os.environ.update(tree_env(host_tree))
        try:
            lc = LocalCluster(Path(d), hosts=hosts).start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            if host_tree is not None:
                want = [f"{k}={v}".encode() for k, v in tree_env(host_tree).items()]
                for h in lc.hosts:
                    env = Path(f"/proc/{h.pid}/environ").read_bytes().split(b"\0")
                    if not all(w in env for w in want):
                        raise RuntimeError(f"host {h.pid} did not get the tree {host_tree} on its path")
            yield lc
        finally:
            lc.stop()
