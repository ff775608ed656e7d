"""``LocalCluster(secure=True)`` (``zmqueue up --secure``): generated keys, registered, used."""

from __future__ import annotations

from pathlib import Path

import pytest

import zmqueue
from tests.conftest import HostFactory
from zmqueue.cli.main import main
from zmqueue.errors import RequestTimeout
from zmqueue.localcluster import LocalCluster


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
        with zmqueue.connect(lc.consul_addr, request_timeout=1, retries=0) as plain, \
                pytest.raises(RequestTimeout, match="CURVE is on at one end only"):
            plain.ping()
