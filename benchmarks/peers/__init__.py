"""The same workloads against the queues users would pick instead, each
installed from Debian's packages and started on 127.0.0.1 by
:mod:`benchmarks.peers.harness`. Run: ``python -m benchmarks.peers``."""
