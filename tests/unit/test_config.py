"""Config dataclasses validate explicit bounds with messages naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from zmqueue.config import HostConfig, QueueConfig, from_env, parse_consul_addresses
from zmqueue.controlplane.queue_directory import config_diff
from zmqueue.errors import ConfigError


def test_a_default_queue_config_is_valid_and_round_trips_through_a_dict() -> None:
    cfg = QueueConfig("orders").validate()
    assert QueueConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"visibility_timeout_s": -1}, "visibility_timeout"),
    ({"visibility_timeout_s": 50000}, "visibility_timeout"),
    ({"max_message_bytes": 10}, "max_message_bytes"),
    ({"fsync": "sometimes"}, "fsync"),
    ({"dead_letter_queue": "bad name!"}, "queue name"),
    ({"max_receive_count": 0}, "max_receive_count"),
    ({"sync_quorum": "most"}, r"sync_quorum: must be one of \('majority', 'all'\), got 'most'"),
])
def test_an_out_of_range_queue_setting_is_refused_naming_the_field(
        kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        QueueConfig("orders", **kwargs).validate()


def test_bad_queue_names_are_refused() -> None:
    for name in ("", "a b", "x" * 81, "ü", "q.fifo"):
        with pytest.raises(ConfigError):
            QueueConfig(name).validate()
    QueueConfig("q.fifo", fifo=True).validate()


def test_unknown_keys_in_stored_config_are_kept_not_fatal() -> None:
    cfg = QueueConfig.from_dict({"name": "q", "future_knob": 3})
    assert cfg.extra == {"future_knob": 3}


def test_a_host_config_refuses_bad_consul_addresses_and_ttls() -> None:
    with pytest.raises(ConfigError, match="consul"):
        HostConfig("c", "n", "/d", consul=("nohostport",)).validate()
    with pytest.raises(ConfigError, match="check_ttl_ms"):
        HostConfig("c", "n", "/d", heartbeat_interval_ms=2000, check_ttl_ms=3000).validate()
    with pytest.raises(ConfigError, match="min_free_disk_mb"):
        HostConfig("c", "n", "/d", min_free_disk_mb=-1).validate()
    assert HostConfig("c", "n", "/d").validate().min_free_disk_mb == 64
    with pytest.raises(ConfigError, match="segment_roll_ms"):
        HostConfig("c", "n", "/d", segment_roll_ms=999).validate()
    assert HostConfig("c", "n", "/d").validate().segment_roll_ms == 3_600_000


def test_consul_addresses_come_from_the_environment_in_one_place() -> None:
    assert parse_consul_addresses("http://a:1, b:2") == ("a:1", "b:2")
    assert from_env({"CONSUL_HTTP_ADDR": "x:9"})["consul"] == ("x:9",)
    assert from_env({})["consul"] == ("127.0.0.1:8500",)


@pytest.mark.parametrize("consul", ["nonsense:xx", "a:0", "a:70000", "a", ["a:1", "b"], []])
def test_connect_refuses_a_consul_address_that_is_not_host_port(consul: str | list[str]) -> None:
    import zmqueue

    with pytest.raises(ConfigError, match="HOST:PORT") as exc:
        zmqueue.connect(consul)
    assert exc.value.details["field"] == "consul"


def test_connect_takes_addresses_as_text_or_a_sequence_and_checks_its_numbers() -> None:
    import zmqueue

    with zmqueue.connect(["http://a:1", " b:2"]) as c:
        assert c.consul_addresses == ("a:1", "b:2")
    for bad in ({"request_timeout": 0}, {"retries": -1}, {"throttle_retries": -1}):
        with pytest.raises(ConfigError, match="request_timeout must be > 0"):
            zmqueue.connect("a:1", **bad)  # type: ignore[arg-type]


def test_sync_quorum_is_fixed_at_creation() -> None:
    """Records acknowledged on a majority must not be left to an election that
    trusts any one voter (docs/REPLICATION.md, Guarantees)."""
    cfg = QueueConfig("orders", replication_factor=3, sync_quorum="all").validate()
    assert QueueConfig.from_dict(cfg.to_dict()).sync_quorum == "all"
    assert QueueConfig.from_dict({"name": "old"}).sync_quorum == "majority"  # (configs written before it)
    with pytest.raises(ConfigError, match="sync_quorum cannot change after a queue is created"):
        cfg.updated({"sync_quorum": "majority"})


def test_a_queue_that_exists_with_other_settings_names_them_as_create_queue_takes_them() -> None:
    """(QueueAlreadyExists said ``delay_s, retention_s, visibility_timeout_s``,
    the config's field names, where create_queue and the CLI take ``delay``,
    ``retention``, ``visibility_timeout``.)"""
    old = QueueConfig("q", visibility_timeout_s=30, retention_s=600, delay_s=0)
    new = QueueConfig("q", visibility_timeout_s=31, retention_s=601, delay_s=1, max_receive_count=3)
    assert config_diff(old, new) == ["delay", "max_receive_count", "retention", "visibility_timeout"]


def test_a_bad_dead_letter_queue_name_is_refused_naming_the_setting() -> None:
    """(``dead_letter_queue=''`` said "invalid queue name ''", field ``name``.)"""
    with pytest.raises(ConfigError, match=r"invalid dead_letter_queue \(a queue name\) ''") as err:
        QueueConfig("q", dead_letter_queue="").validate()
    assert err.value.details["field"] == "dead_letter_queue"
    with pytest.raises(ConfigError, match="invalid queue name 'a b'") as err:
        QueueConfig("a b").validate()
    assert err.value.details["field"] == "name"
