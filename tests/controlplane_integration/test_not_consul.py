"""A Consul address where another HTTP server answers (a web app on the
wrong port): every entry point says so, not py-consul's raw "Missing index
header". The server is a real one (http.server on 127.0.0.1): it is the bad
input, not a Consul stand-in."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import zmqueue
from zmqueue.cli.main import main as cli
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import list_hosts
from zmqueue.localcluster import ConsulAgent


@pytest.fixture
def web_server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def says_not_consul(text: str, addr: str) -> bool:
    return (f"the server at {addr} answered but is not a Consul agent (no X-Consul-Index header): "
            "check --consul / CONSUL_HTTP_ADDR") in text


def test_the_client_says_the_server_is_not_consul(web_server: str) -> None:
    client = zmqueue.connect(web_server, request_timeout=3)
    try:
        with pytest.raises(zmqueue.NotConsul) as info:
            client.get_queue("x")
        assert isinstance(info.value, zmqueue.ConsulUnavailable)
        assert says_not_consul(str(info.value), web_server)
    finally:
        client.close()


def test_a_write_answered_with_an_error_page_is_not_consul_either(web_server: str) -> None:
    # (a PUT: SimpleHTTPRequestHandler answers 501 with an HTML page)
    with pytest.raises(zmqueue.NotConsul, match="answered with an HTML page"):
        ConsulClient([web_server], timeout_s=2).call(lambda c: c.kv.put("zmqueue/x", "1"))


def test_failover_skips_a_server_that_is_not_consul(web_server: str, consul_agent: ConsulAgent) -> None:
    client = ConsulClient([web_server, consul_agent.http_addr], timeout_s=2)
    assert isinstance(list_hosts(client), list)
    assert client.address == consul_agent.http_addr


def test_the_cli_says_the_server_is_not_consul(web_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["status"], ["queue", "list"]):
        assert cli([*argv, "--consul", web_server]) == 1
        err = capsys.readouterr().err
        assert says_not_consul(err, web_server) and "Traceback" not in err, err


def test_a_host_pointed_at_it_exits_with_the_message_not_a_traceback(web_server: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "zmqueue", "host", "--cluster", "c1", "--node", "n1",
                        "--data-dir", str(tmp_path / "d"), "--consul", web_server],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert says_not_consul(p.stderr, web_server) and "Traceback" not in p.stderr, p.stderr
