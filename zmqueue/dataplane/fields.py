"""Typed, bounded access to request bodies: a bad field is an InvalidParameter
naming the field and the expected range, never a KeyError or TypeError."""

from __future__ import annotations

from typing import Any

from zmqueue.config import validate_queue_name
from zmqueue.errors import InvalidParameter


def body_map(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidParameter("request body must be a map")
    return body


def get_int(body: dict[str, Any], key: str, lo: int, hi: int, default: int | None = None,
            name: str | None = None) -> int:
    value = body.get(key, default)
    label = name or key
    if value is None:
        raise InvalidParameter(f"{label} is required", field=label)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidParameter(f"{label} must be an integer from {lo} to {hi}, got {value!r:.40}",
                               field=label, min=lo, max=hi)
    return value


def get_opt_int(body: dict[str, Any], key: str, lo: int, hi: int, name: str | None = None) -> int | None:
    if body.get(key) is None:
        return None
    return get_int(body, key, lo, hi, name=name)


def get_str(body: dict[str, Any], key: str, max_len: int = 256, name: str | None = None,
            optional: bool = False) -> str | None:
    value = body.get(key)
    label = name or key
    if value is None and optional:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise InvalidParameter(f"{label} must be a string of 1-{max_len} characters", field=label)
    return value


def get_queue(body: dict[str, Any], key: str = "q") -> str:
    return validate_queue_name(body.get(key))


def get_list(body: dict[str, Any], key: str, max_len: int, name: str | None = None) -> list[Any]:
    value = body.get(key)
    label = name or key
    if not isinstance(value, list) or not 0 < len(value) <= max_len:
        raise InvalidParameter(f"{label} must be a list of 1 to {max_len} items", field=label,
                               max=max_len)
    return value
