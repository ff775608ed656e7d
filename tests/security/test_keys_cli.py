"""``zmqueue keys`` prints keys as they are (a real Consul agent).

A z85 key may hold ``[`` and ``]``; printed through rich's markup, a part
like ``[ab]`` was taken for a style tag and cut out of the key, so `keys
list` and `keys register` showed a key other than the registered one. Found
by QA in the forty-sixth session. Printed unwrapped, whatever the terminal's
width (CI's narrower console split the register line over two lines)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from zmqueue.cli.main import main
from zmqueue.controlplane import keyring
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.localcluster import ConsulAgent
from zmqueue.security import curve

KEY = "0[ab]" * 8
"""A valid z85 public key (40 characters, 32 bytes) holding what rich reads as markup."""


def test_keys_with_brackets_are_printed_whole(consul_agent: ConsulAgent, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert curve.check_key(KEY) == KEY.encode()
    name = f"bracket-{uuid.uuid4().hex[:8]}"
    (tmp_path / "k.key").write_text(KEY + "\n")
    addr = consul_agent.http_addr
    try:
        assert main(["keys", "register", "--public", str(tmp_path / "k.key"), "--role", "client",
                     "--name", name, "--consul", addr]) == 0
        assert f"registered client key '{name}' for global: {KEY}" in capsys.readouterr().out
        assert main(["keys", "list", "--consul", addr]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if name in line)
        assert KEY in row, row
    finally:
        keyring.revoke_key(ConsulClient([addr], timeout_s=3.0), keyring.GLOBAL, name)
