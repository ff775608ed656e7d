"""Module-scoped clusters of the front-door tests run on their own Consul
agent: a function-scoped ``hosts`` test on the same xdist worker wipes the
shared agent's KV and services at teardown, which would pull registered
keys, policies and hosts from under a cluster shared by a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import QueueCluster, running_agent, started
from tests.security.harness import SecureCluster
from zmqueue.localcluster import ConsulAgent


@pytest.fixture(scope="module")
def private_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsulAgent]:
    with running_agent(tmp_path_factory.mktemp("consul-private")) as agent:
        yield agent


@pytest.fixture(scope="module")
def secure(private_agent: ConsulAgent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    """Two CURVE-secured hosts (with an at-rest key dir) and clients alice and bob."""
    with started(SecureCluster(private_agent, tmp_path_factory.mktemp("secure"))) as sc:
        yield sc


@pytest.fixture(scope="module")
def plain_cluster(private_agent: ConsulAgent, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[QueueCluster]:
    """Two plaintext hosts and a client (like ``qcluster``, on the private agent)."""
    with started(QueueCluster(private_agent, tmp_path_factory.mktemp("plain"), 2)) as qc:
        yield qc
