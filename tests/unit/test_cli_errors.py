"""The command line answers a bad argument with one line and exit status 1,
never a Python traceback: bad Consul addresses, paths that do not exist or
cannot be written, names that cannot stand in a KV key or a file name."""

from __future__ import annotations

from pathlib import Path

import pytest

from zmqueue.cli.main import main


@pytest.mark.parametrize("argv, says", [
    (["status", "--consul", "garbage"], "'garbage' is not HOST:PORT"),
    (["status", "--consul", "127.0.0.1"], "'127.0.0.1' is not HOST:PORT"),
    (["keys", "list", "--consul", "127.0.0.1:http"], "is not HOST:PORT"),
    (["keys", "revoke", "--name", "k", "--consul", "garbage"], "is not HOST:PORT"),
    (["keys", "generate", "--out", "/proc/no-such-dir/k"], "No such file or directory: /proc/no-such-dir"),
    (["usage", "--data", "{tmp}", "--csv", "/nonexistent-dir/x.csv"], "No such file or directory"),
    (["analytics", "throughput", "--data", "/nonexistent-dir"], "no such data directory: /nonexistent-dir"),
    (["keys", "data-key", "--queue", "bad/../name", "--key-dir", "{tmp}"], "invalid queue name"),
    (["keys", "data-key", "--queue", "", "--key-dir", "{tmp}"], "invalid queue name"),
    (["demo", "--hosts", "0"], "--hosts must be 1 to 16, got 0"),
    (["analytics", "deliveries", "--data", "{tmp}", "--since", "yesterday"], "is not a time"),
    (["analytics", "deliveries", "--data", "{tmp}", "--since", "2026-11-29T10:00",
      "--until", "2026-11-29T09:00"], "is not before --until"),
    (["analytics", "deliveries", "--data", "{tmp}", "--key-dir", "/nonexistent-keys"],
     "no such key directory"),
    (["analytics", "deliveries", "--data", "{tmp}", "--rows", "-1"], "--rows must be 0 or more"),
    (["usage", "--data", "{tmp}/empty"], "no usage.jsonl under"),
    (["analytics", "deliveries", "--data", "{tmp}"], "no zmqueue host data directory under"),
    (["analytics", "deliveries", "--data", "{tmp}", "--master", "bogus"], "is not a Spark master URL"),
    (["analytics", "latency", "--data", "{tmp}", "--out", "{tmp}/usage.jsonl/x.parquet"],
     "usage.jsonl is not a directory"),
])
def test_a_bad_argument_is_one_line_and_status_1(
        argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "usage.jsonl").write_text("")  # (what `usage` reads: found, no records)
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 1, err
    assert says in err and "Traceback" not in err
    name = " ".join(argv[:2]) if argv[0] in {"keys", "analytics", "queue"} else argv[0]
    assert err.startswith(f"zmqueue {name}: error: "), "the error names the command and its action"
    assert not list(tmp_path.glob("*.key")), "no key file was written"


def test_a_key_name_or_cluster_that_cannot_be_a_kv_path_segment_is_refused(tmp_path: Path) -> None:
    from zmqueue.config import validate_ident
    from zmqueue.controlplane.keyring import register_key
    from zmqueue.errors import ConfigError

    for bad in ("bad/name", "", "a" * 65, "x\n", "../up"):
        with pytest.raises(ConfigError, match="use 1-64 of"):
            validate_ident(bad, "name")
        with pytest.raises(ConfigError, match="invalid name"):
            register_key(None, "global", bad, "pub", "client")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="invalid cluster"):
            register_key(None, bad, "k1", "pub", "client")  # type: ignore[arg-type]
    assert validate_ident("c1-h2.x_y", "node") == "c1-h2.x_y"


def test_a_local_cluster_of_no_hosts_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from zmqueue.errors import ConfigError
    from zmqueue.localcluster import LocalCluster

    for hosts, clusters in ((0, 1), (3, 0)):
        with pytest.raises(ConfigError, match="at least 1 cluster of 1 host"):
            LocalCluster(tmp_path / "lc", hosts=hosts, clusters=clusters)
    assert not (tmp_path / "lc").exists()


def test_keys_generate_keeps_an_existing_pair_unless_forced(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """(A second ``keys generate`` of a name overwrote its pair, locking out
    the identity registered with the old public key.)"""
    assert main(["keys", "generate", "--out", str(tmp_path), "--name", "ops"]) == 0
    secret = tmp_path / "ops.key_secret"
    first = secret.read_bytes()
    assert secret.stat().st_mode & 0o777 == 0o600
    capsys.readouterr()
    assert main(["keys", "generate", "--out", str(tmp_path), "--name", "ops"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("zmqueue keys generate: error: ") and "pass --force" in err
    assert secret.read_bytes() == first, "the pair was kept"
    assert main(["keys", "generate", "--out", str(tmp_path), "--name", "ops", "--force"]) == 0
    assert secret.read_bytes() != first and secret.stat().st_mode & 0o777 == 0o600


def test_a_key_dir_inside_the_data_dir_is_refused(tmp_path: Path) -> None:
    from zmqueue.config import HostConfig
    from zmqueue.errors import ConfigError

    for key_dir in (tmp_path / "data", tmp_path / "data" / "atrest"):
        with pytest.raises(ConfigError, match="must not be the data directory or inside it"):
            HostConfig(cluster="c1", node="n1", data_dir=str(tmp_path / "data"),
                       key_dir=str(key_dir)).validate()
    HostConfig(cluster="c1", node="n1", data_dir=str(tmp_path / "data"),
               key_dir=str(tmp_path / "keys")).validate()
