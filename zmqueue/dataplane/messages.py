"""What the queue layer checks of a message beside its body.

The storage engine keeps an opaque attributes blob per message. The queue
layer puts a MessagePack map in it (written and read by
:func:`zmqueue.protocol.encode_blob` and :func:`zmqueue.protocol.decode_blob`,
and counted against ``max_message_bytes`` by
:func:`zmqueue.protocol.check_size`, which the client uses too):

| key | meaning |
|---|---|
| ``a`` | user attributes (map of str -> str/int/float/bytes) |
| ``g`` | FIFO message group id (str) |
| ``d`` | deduplication id (str) |
| ``rc`` | receive count carried over from the source queue (DLQ moves) |
| ``src`` | source queue of a dead-lettered message |

Receipt handles are part of the wire protocol (:class:`zmqueue.protocol.Receipt`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from zmqueue.errors import InvalidParameter, WrongPartition
from zmqueue.protocol import group_partition

MAX_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME = 256


def group_hash(group: str | None) -> int:
    """Stable u64 of a group id (0 means "no group")."""
    if not group:
        return 0
    h = int.from_bytes(hashlib.blake2b(group.encode(), digest_size=8).digest(), "big")
    return h or 1


def validate_attributes(attrs: Any, at: int | None = None) -> dict[str, Any]:
    """``attrs`` checked; an error names message ``at`` of the request, if given."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise _bad_attributes(at, "attributes must be a map of name -> value")
    if len(attrs) > MAX_ATTRIBUTES:
        raise _bad_attributes(at, f"too many attributes: {len(attrs)} (the limit is {MAX_ATTRIBUTES})",
                              count=len(attrs), limit=MAX_ATTRIBUTES)
    for k, v in attrs.items():
        if not isinstance(k, str) or not 0 < len(k) <= MAX_ATTRIBUTE_NAME:
            raise _bad_attributes(at, f"attribute name {k!r:.60} must be 1-{MAX_ATTRIBUTE_NAME} chars")
        if not isinstance(v, str | int | float | bytes) or isinstance(v, bool):
            raise _bad_attributes(at, f"attribute {k!r:.60} must be a str, int, float or bytes")
    return attrs


def _bad_attributes(at: int | None, why: str, **details: Any) -> InvalidParameter:
    """InvalidParameter on ``attributes``, naming message ``at`` of the request if given."""
    return InvalidParameter(why if at is None else f"message {at}: {why}", field="attributes", **details)


def check_groups(items: list[Any], queue: str, partition: int, partitions: int) -> None:
    """A FIFO SEND's messages (``m`` items) belong to ``partition``: each
    group maps there by ``partitions`` (this host's count), else
    WrongPartition naming the group's partition, before anything is stored.
    A group on the wrong partition would be two streams, each in order, but
    not in order with each other. Malformed items are left to the send's
    own checks."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        group = item[3] if isinstance(item, list) and len(item) == 5 else None
        if not isinstance(group, str) or group in seen:
            continue
        seen.add(group)
        right = group_partition(group, partitions)
        if right != partition:
            raise WrongPartition(
                f"message {i}: group {group!r:.140} belongs to partition {right} of queue {queue!r}, "
                f"which has {partitions} partitions, not to partition {partition}; nothing was "
                "stored: re-read the queue (its partitions changed) and send again",
                group=group, partition=right, partitions=partitions)
