"""Bench options are validated before anything starts."""

from __future__ import annotations

import pytest

from zmqueue.bench.config import BenchConfig, preset
from zmqueue.errors import ConfigError


def test_push_consumers_are_for_zmqueue_only() -> None:
    assert preset("W3", consumer_mode="push").consumer_mode == "push"
    with pytest.raises(ConfigError, match="zmqueue only"):
        BenchConfig(system="redis", consumer_mode="push").validate()
    with pytest.raises(ConfigError, match="consumer_mode"):
        BenchConfig(consumer_mode="poll").validate()


def test_a_window_pipelines_single_sends_to_standard_queues() -> None:
    cfg = preset("W1p")
    assert (cfg.window, cfg.batch, cfg.per_receive) == (100, 1, 100)
    assert preset("W5p").replication_factor == 3
    assert preset("W1").per_receive == 10 and preset("W3").per_receive == 100
    with pytest.raises(ConfigError, match="batch=1"):
        BenchConfig(window=10, batch=10).validate()
    assert BenchConfig(window=10, queue_type="fifo").validate().max_requests is None
    with pytest.raises(ConfigError, match="FIFO"):
        BenchConfig(window=10, queue_type="fifo", max_requests=2).validate()


@pytest.mark.parametrize(("field", "value"), [("batch", 0), ("batch", 1001), ("producers", 65),
                                              ("message_bytes", 10), ("queue_type", "lifo"),
                                              ("fsync", "sometimes"), ("warmup_s", 20.0),
                                              ("window", 0), ("window", 1001), ("max_requests", 0),
                                              ("max_requests", 1001), ("sync_quorum", "most"),
                                              ("rate_per_s", -1.0), ("rate_per_s", float("nan")),
                                              ("rate_per_s", float("inf"))])
def test_out_of_range_options_name_the_option(field: str, value: object) -> None:
    """(A rate of nan or inf was taken, and paced nothing: sends went flat out.)"""
    with pytest.raises(ConfigError, match=field):
        BenchConfig(**{field: value}).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize(("argv", "says"), [
    (["--size", "5"], "--size 5: must be 20 to 1 MiB"),
    (["--workload", "W3", "--size", "5"], "--size 5: must be 20 to 1 MiB"),
    (["--producers", "99"], "--producers 99: must be 1 to 64"),
    (["--receives-in-flight", "0"], "--receives-in-flight 0: "),
    # (every send, or every receive of 100, failed: a request or reply is at most 64 MiB)
    (["--size", "1048576", "--batch", "100"], "--size 1048576: 100 messages of it in one send or receive"),
    (["--workload", "W1p", "--size", "1048576"], "--size 1048576: 100 messages of it in one send or receive"),
    (["--warmup", "5", "--duration", "3"], "--warmup 5.0: must be 0 or more and below the duration"),
])
def test_the_command_line_names_the_option_given_not_the_field_it_sets(argv: list[str], says: str) -> None:
    from zmqueue.cli.bench_cmds import configs
    from zmqueue.cli.main import build_parser

    args = build_parser().parse_args(["bench", *argv])
    with pytest.raises(ConfigError) as info:
        configs(args)
    assert str(info.value).startswith(says), str(info.value)
