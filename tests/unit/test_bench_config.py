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


@pytest.mark.parametrize(("field", "value"), [("batch", 0), ("batch", 1001), ("producers", 65),
                                              ("message_bytes", 10), ("queue_type", "lifo"),
                                              ("fsync", "sometimes"), ("warmup_s", 20.0)])
def test_out_of_range_options_name_the_option(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        BenchConfig(**{field: value}).validate()  # type: ignore[arg-type]
