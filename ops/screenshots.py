"""Refresh the Consul UI screenshots of docs/OPERATOR_GUIDE.md.

    python ops/screenshots.py            # writes docs/img/consul/*.png
    python ops/screenshots.py --out DIR

Starts a throwaway local system (a Consul dev agent and one cluster of three
hosts, c1-h1..c1-h3), creates the queue ``orders`` with replication factor 3,
then drives headless Chromium (Debian's package, through Playwright) over the
Consul UI with the same checks as
tests/controlplane_integration/test_consul_ui.py, saving a 1280x800 PNG of
each page. Needs `bash ops/install-test-deps.sh` and `pip install -e '.[test]'`.
Everything it started is stopped by pid on exit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import zmqueue  # noqa: E402
from tests.controlplane_integration.test_consul_ui import (  # noqa: E402
    BrowserMissing,
    check_cluster_in_ui,
    wait_kv,
)
from zmqueue.localcluster import LocalCluster  # noqa: E402

MAX_PNG_BYTES = 300_000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "consul",
                    help="directory for the PNGs (default: docs/img/consul)")
    ap.add_argument("--hosts", type=int, default=3)
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()

    with tempfile.TemporaryDirectory(prefix="zmqueue-shots-") as tmp:
        cluster = LocalCluster(Path(tmp), hosts=args.hosts)
        try:
            cluster.start()
            assert cluster.consul_addr is not None
            addr = cluster.consul_addr
            client = zmqueue.connect(addr, request_timeout=10)
            try:
                client.create_queue("orders", replication_factor=min(3, args.hosts))
            finally:
                client.close()
            wait_kv(addr, "zmqueue/leaders/orders/")
            nodes = [h.node for h in cluster.hosts]
            shots = check_cluster_in_ui(addr, nodes, "orders", Path(tmp), out)
        except BrowserMissing as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        finally:
            cluster.stop()
    too_big = False
    for png in shots:
        size = png.stat().st_size
        too_big |= size > MAX_PNG_BYTES
        print(f"{png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}  {size // 1024} KB")
    if too_big:
        print(f"error: a PNG is over {MAX_PNG_BYTES // 1000} KB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
