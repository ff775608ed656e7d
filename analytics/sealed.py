"""Payloads sealed at rest (queues created with ``encrypted=True``).

A sealed body or attribute blob is stored as::

    0xE5 | key id (u8) | nonce (12 bytes) | AES-256-GCM ciphertext | tag (16 bytes)

with associated data ``b"zmq-at-rest|" + queue + b"|" + message_id (16 bytes) + part``
(``b"b"`` for the body, ``b"a"`` for the attribute blob). An empty blob stays
empty. Keys come from a key directory (option ``keyDir``): ``<queue>.key``
holds lines ``<id>:<base64 of 32 bytes>``. Without a key, sealed payloads are
reported as encrypted and never guessed at.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

MAGIC = 0xE5
HEADER = 2 + 12
OVERHEAD = HEADER + 16
BODY, ATTRS = b"b", b"a"


FLAG_SEALED = 0x1
"""Record flag: the MESSAGE's body and attribute blob are sealed at rest."""
FLAG_SEAL_KNOWN = 0x2
"""Record flag: the writer says whether FLAG_SEALED holds (records a host wrote
since the thirty-fourth session); without it a reader guesses from the
payload's first byte, which a plain body may share (docs/SEGMENT_FORMAT.md)."""


def is_sealed(data: bytes, flags: int = 0) -> bool:
    """Whether a stored body or blob is sealed: as its record's flags say, when
    they say; else by its first byte (older logs)."""
    if len(data) < OVERHEAD:
        return False
    if flags & FLAG_SEAL_KNOWN:
        return bool(flags & FLAG_SEALED)
    return data[0] == MAGIC


class KeyRing:
    """The keys of a key directory, loaded per queue on first use."""

    def __init__(self, key_dir: str | Path) -> None:
        self.dir = Path(key_dir)
        if not self.dir.is_dir():
            raise FileNotFoundError(f"no such key directory: {self.dir}")
        self._aeads: dict[str, dict[int, Any]] = {}

    def _load(self, queue: str) -> dict[int, Any]:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        out: dict[int, Any] = {}
        path = self.dir / f"{queue}.key"
        if path.exists():
            for line in path.read_text().splitlines():
                kid, sep, b64 = line.strip().partition(":")
                if not sep or line.startswith("#"):
                    continue
                try:
                    out[int(kid)] = AESGCM(base64.b64decode(b64, validate=True))
                except ValueError:
                    continue
        return out

    def open(self, queue: str, data: bytes, message_id: bytes, part: bytes) -> bytes | None:
        """The plaintext, or None when no key opens it."""
        aeads = self._aeads.get(queue)
        if aeads is None:
            aeads = self._aeads[queue] = self._load(queue)
        aead = aeads.get(data[1])
        if aead is None:
            return None
        aad = b"zmq-at-rest|" + queue.encode() + b"|" + message_id + part
        try:
            plain: bytes = aead.decrypt(data[2:HEADER], data[HEADER:], aad)
        except Exception:  # InvalidTag: wrong key or damaged payload
            return None
        return plain
