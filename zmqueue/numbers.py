"""Whole numbers inside names: partitions in KV keys and stream ids, sequences in file names.

``str.isdigit`` is true for characters ``int`` cannot read ('²', '①') and
for strings longer than ``int`` reads (4300 digits), so a name from a peer,
a KV key or a file could raise ValueError where a bad name was meant to be
skipped or refused. Every such parse goes through :func:`digits`.
"""

from __future__ import annotations

PARTITION_DIGITS = 6
"""A partition number in a name has at most this many digits (queues have at most a few hundred)."""


def digits(text: str, most: int = PARTITION_DIGITS) -> int | None:
    """The number ``text`` spells in 1 to ``most`` ASCII digits, else None."""
    if 0 < len(text) <= most and text.isascii() and text.isdigit():
        return int(text)
    return None
