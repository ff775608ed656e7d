"""Decoding the attributes blob of a MESSAGE record.

The queue layer stores a MessagePack map beside each body (documented in
docs/ANALYTICS.md; keys are optional, unknown keys are ignored):

| key | meaning |
|---|---|
| ``a`` | user attributes (map of str -> str/int/float/bytes) |
| ``g`` | FIFO message group id (str) |
| ``d`` | deduplication id (str) |
| ``rc`` | receive count carried over from the source queue (DLQ moves) |
| ``src`` | source queue of a dead-lettered message |
| ``cid`` | client identity of the producer (when the host records it) |

A blob that is not a map (or not MessagePack) decodes to "nothing known".
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack
import numpy as np
import pyarrow as pa

from analytics.schema import ARROW_TYPES
from analytics.sealed import ATTRS, KeyRing, is_sealed

MESSAGE = 1
MAX_CACHE = 4096


class Fields(NamedTuple):
    group_id: str | None
    dedup_id: str | None
    client_id: str | None
    dlq_source: str | None
    carried_receive_count: int | None
    attributes: list[tuple[str, str]] | None


EMPTY = Fields(None, None, None, None, None, None)


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def decode_blob(blob: bytes) -> Fields:
    if not blob:
        return EMPTY
    try:
        m = msgpack.unpackb(blob, raw=False, strict_map_key=False)
    except Exception:  # foreign or damaged blob: report what is known, never fail
        return EMPTY
    if not isinstance(m, dict):
        return EMPTY
    attrs = m.get("a")
    pairs = ([(str(k), _text(v) or "") for k, v in attrs.items()] if isinstance(attrs, dict) and attrs
             else None)
    rc = m.get("rc")
    return Fields(_text(m.get("g")), _text(m.get("d")), _text(m.get("cid")), _text(m.get("src")),
                  rc if isinstance(rc, int) and not isinstance(rc, bool) else None, pairs)


class BlobFields:
    """Blob-derived columns of one block, built lazily per column; ``sealed``
    marks blobs sealed at rest (whether or not a key opened them)."""

    def __init__(self, n: int, rows: dict[int, Fields], sealed: np.ndarray) -> None:
        self.n, self.rows, self.sealed = n, rows, sealed

    def column(self, name: str) -> pa.Array:
        t = ARROW_TYPES[name]
        if not self.rows:
            return pa.nulls(self.n, t)
        values: list[Any] = [None] * self.n
        for i, f in self.rows.items():
            values[i] = getattr(f, name)
        return pa.array(values, t)


def decode_blobs(table: np.ndarray, heap: bytes, cache: dict[bytes, Fields], queue: str = "",
                 keys: KeyRing | None = None) -> BlobFields:
    """Fields of every MESSAGE record of a block table that has a blob (sealed ones opened
    with ``keys`` when given, else left unknown)."""
    idx = np.flatnonzero((table["type"] == MESSAGE) & (table["attr_len"] > 0))
    rows: dict[int, Fields] = {}
    sealed = np.zeros(len(table), dtype=bool)
    if len(idx):
        starts = (table["data_off"][idx].astype(np.int64) + table["body_len"][idx]).tolist()
        lens = table["attr_len"][idx].tolist()
        flags = table["flags"][idx].tolist()
        for i, s, n, fl in zip(idx.tolist(), starts, lens, flags, strict=True):
            blob = heap[s:s + n]
            if is_sealed(blob, fl):
                sealed[i] = True
                opened = keys.open(queue, blob, table["message_id"][i].tobytes(), ATTRS) if keys else None
                if opened is None:
                    continue
                blob = opened
            f = cache.get(blob)
            if f is None:
                f = decode_blob(blob)
                if len(cache) < MAX_CACHE:
                    cache[blob] = f
            if f is not EMPTY:
                rows[i] = f
    return BlobFields(len(table), rows, sealed)
