"""``LocalCluster(secure=True)`` (``zmqueue up --secure``): generated keys, registered, used."""

from __future__ import annotations

from pathlib import Path

import pytest

import zmqueue
from tests.conftest import HostFactory
from zmqueue.cli.main import main
from zmqueue.errors import ConnectionLost, RequestTimeout
from zmqueue.localcluster import LocalCluster
from zmqueue.security.curve import generate, load_secret


def test_a_secured_local_cluster_serves_its_registered_client_only(
        hosts: HostFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lc = LocalCluster(tmp_path / "lc", hosts=1, consul=hosts.agent.http_addr, secure=True)
    with lc:
        assert lc.client_secret_file is not None and lc.client_secret_file.exists()
        with zmqueue.connect(lc.consul_addr, request_timeout=5,
                             curve_secret_file=str(lc.client_secret_file)) as c:
            q = c.create_queue("secured-demo")
            q.send(b"hi")
            assert [m.body for m in q.receive(wait_time=5)] == [b"hi"]
            # the CLI's queue and message commands take the same secret key file
            secret = ["--consul", str(lc.consul_addr), "--curve-secret", str(lc.client_secret_file)]
            assert main(["send", "secured-demo", "from the cli", *secret]) == 0
            assert main(["receive", "secured-demo", "--wait", "5", "--delete", *secret]) == 0
            out = capsys.readouterr().out
            assert '"body": "from the cli"' in out
            [ep] = [h.client_endpoint for h in c.hosts()]
            host_key = c.curve.server_key(ep) if c.curve else None
            assert host_key is not None
        # pinned server keys are the only ones used: Consul's cannot stand in for them
        own_public = load_secret(lc.client_secret_file)[0].decode()  # a key, but not the host's
        with zmqueue.connect(lc.consul_addr, request_timeout=2, retries=0,
                             curve_secret_file=str(lc.client_secret_file),
                             curve_server_keys=own_public) as wrong, \
                pytest.raises(zmqueue.ZmqueueError, match="CURVE"):
            wrong.ping()
        # keys pinned for other endpoints only: said so (it read "no healthy host is registered")
        with zmqueue.connect(lc.consul_addr, request_timeout=1, retries=0,
                             curve_secret_file=str(lc.client_secret_file),
                             curve_server_keys={"tcp://127.0.0.1:1": host_key.decode()}) as elsewhere, \
                pytest.raises(zmqueue.Unavailable, match="knows no CURVE public key for any of them"):
            elsewhere.create_queue("secured-demo")
        with zmqueue.connect(lc.consul_addr, request_timeout=5,
                             curve_secret_file=str(lc.client_secret_file),
                             curve_server_keys={ep: host_key.decode()}) as pinned:
            assert pinned.curve is not None and pinned.curve.server_key(ep) == host_key
            pinned.get_queue("secured-demo").send(b"over a pinned key")
        # a key no host accepts: the refusal is what the caller hears after the retries, not
        # a circuit breaker opened by them (a refused handshake is an answer: the host is alive)
        _, stranger = generate(tmp_path / "stranger", "stranger")
        with zmqueue.connect(lc.consul_addr, request_timeout=3, curve_secret_file=str(stranger)) as c3, \
                pytest.raises(ConnectionLost, match="refused this client's CURVE key"):
            c3.get_queue("secured-demo").send(b"not admitted")
        with zmqueue.connect(lc.consul_addr, request_timeout=1, retries=0) as plain, \
                pytest.raises(RequestTimeout, match="CURVE is on at one end only"):
            plain.ping()
