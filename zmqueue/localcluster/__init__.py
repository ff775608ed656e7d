"""Local process supervision: a real Consul agent and real host processes on
127.0.0.1, used by ``zmqueue up``, ``zmqueue demo``, the benchmarks and the
test harness. Every process is tracked by pid and stopped by pid."""

from zmqueue.localcluster.consul_agent import ConsulAgent, ConsulCluster, find_consul_binary
from zmqueue.localcluster.hosts import HostProcess, LocalCluster
from zmqueue.localcluster.ports import free_port, free_ports

__all__ = [
    "ConsulAgent",
    "ConsulCluster",
    "HostProcess",
    "LocalCluster",
    "find_consul_binary",
    "free_port",
    "free_ports",
]
