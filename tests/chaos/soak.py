"""The long chaos soak: many seeded scenarios over every fault, queue type,
replication mode, consumer kind (pull or push) and producer kind (one send at a time
or a pipeline), with a real Consul agent it starts itself.

    python -m tests.chaos.soak --seeds 20 [--first-seed 1000] [--messages 1000]

Prints one JSON line per scenario and a summary; exits 1 if any invariant
broke (the failing seeds are printed, rerun one with ZMQUEUE_CHAOS_SEED)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from tests.chaos.harness import FAULTS, ChaosRun, Scenario
from zmqueue.bench.signals import signals_raise
from zmqueue.localcluster import ConsulAgent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=1000)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="zmqueue-soak-"))
    failed = []
    # SIGTERM (`kill`, `timeout`) runs the finally blocks: hosts and Consul stop by pid
    with signals_raise(), ConsulAgent(work / "consul") as agent:
        for i in range(args.seeds):
            seed = args.first_seed + i
            fault = FAULTS[i % len(FAULTS)]
            every = (i // len(FAULTS)) % 2 == 1 and fault.startswith(("kill", "wipe"))  # every other round
            s = Scenario(f"soak-{fault}", fifo=bool(i % 2), sync=(i % 4) < 2 or fault == "kill_two",
                         fault=fault, seed=seed, messages=args.messages, time_limit_s=180,
                         clusters=2 if i % 5 == 4 else 1, consumer=("pull", "pipeline", "push")[i % 3],
                         producer="pipeline" if i % 4 == 2 else "single",  # i % 4 == 2: standard
                         sync_quorum="all" if every else "majority")
            run = ChaosRun(s, agent, work / f"run-{seed}")
            try:
                report = run.run()
            finally:
                run.stop_all()
            print(json.dumps(report.summary()), flush=True)
            if report.problems or (s.sync and report.lost):
                failed.append(seed)
    print(f"soak: {args.seeds} scenarios, failed seeds: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
