"""Replication benchmarks: the cost of R=3 beside R=1, and failover time."""
