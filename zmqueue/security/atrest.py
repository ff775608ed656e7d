"""Encryption at rest of message payloads (per queue, optional).

A queue created with ``encrypted=True`` stores each message's body and
attribute blob sealed with AES-256-GCM (``cryptography``)::

    0xE5 | key id (1 byte) | nonce (12 random bytes) | ciphertext | tag (16 bytes)

The associated data binds a ciphertext to its queue, message id and field
(body or attributes), so sealed payloads cannot be swapped between messages.
An empty attribute blob stays empty. Segment files, replication records and
catch-up replies therefore carry only ciphertext; hosts open payloads when
they deliver them.

Keys live in a key directory given to the host (``--key-dir``), never in the
data directory or in Consul: ``<queue>.key`` holds one key per line,
``<id>:<base64 of 32 bytes>``; the last line is the current key (used to
seal), every line can open. Rotation: append a key (``zmqueue keys
data-key --queue Q --key-dir DIR``) on every host, restart or wait for the
next reload; old keys stay until no segment written with them is retained.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from zmqueue.config import validate_queue_name
from zmqueue.errors import ConfigError, Unavailable

log = logging.getLogger(__name__)

MAGIC = 0xE5
HEADER = 2 + 12
OVERHEAD = HEADER + 16


def key_path(key_dir: str | Path, queue: str) -> Path:
    return Path(key_dir) / f"{validate_queue_name(queue)}.key"


def read_keys(path: Path) -> dict[int, bytes]:
    """The keys of a key file, by id. A file that other users may read is
    used, with a warning (as a CURVE secret key file is): chmod 600 it."""
    keys: dict[int, bytes] = {}
    with contextlib.suppress(OSError):
        mode = os.stat(path).st_mode
        if mode & 0o077:
            log.warning("%s is readable by other users (mode %o): chmod 600 it", path, mode & 0o777)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a key file (not text): expected '<id>:<base64 key>' lines; "
                          "restore it, or make one with `zmqueue keys data-key`", field="key_dir") from None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        kid, _, b64 = line.partition(":")
        try:
            key = base64.b64decode(b64, validate=True)
            ident = int(kid)
        except ValueError:
            raise ConfigError(f"{path}:{n}: expected '<id>:<base64 key>'", field="key_dir") from None
        if len(key) != 32 or not 0 <= ident <= 255:
            raise ConfigError(f"{path}:{n}: a key id is 0-255 and a key 32 bytes", field="key_dir")
        keys[ident] = key
    return keys


def add_key(key_dir: str | Path, queue: str) -> int:
    """Append a new random key (the current one from now on); returns its id."""
    path = key_path(key_dir, queue)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = read_keys(path) if path.exists() else {}
    ident = (max(keys) + 1) if keys else 1
    if ident > 255:
        raise ConfigError(f"{path} has used every key id; drop retired keys first", field="key_dir")
    line = f"{ident}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(line)
    return ident


class PayloadCipher:
    """Seals and opens the payloads of one queue."""

    def __init__(self, queue: str, keys: dict[int, bytes], current: int | None,
                 problem: str | None = None) -> None:
        self.queue = queue
        self.aeads = {k: AESGCM(v) for k, v in keys.items()}
        self.current = current
        self.prefix = b"zmq-at-rest|" + queue.encode() + b"|"
        self.problem = problem
        """Why there is no key (a key file this host cannot read), if known."""

    def _no_key(self) -> Unavailable:
        why = self.problem or f"put {self.queue}.key in its --key-dir"
        return Unavailable(f"queue {self.queue!r} is encrypted but this host has no key for it ({why}, "
                           "then restart the host); its messages stay stored", queue=self.queue,
                           missing_key=True)

    def check_readable(self) -> None:
        """Unavailable when this host holds no key at all for the queue: checked
        before a receive takes messages, which it could not open."""
        if not self.aeads:
            raise self._no_key()

    def _aad(self, message_id: bytes, part: bytes) -> bytes:
        return self.prefix + message_id + part

    def seal(self, data: bytes, message_id: bytes, part: bytes) -> bytes:
        if not data:
            return data
        if self.current is None:
            raise self._no_key()
        nonce = os.urandom(12)
        ct = self.aeads[self.current].encrypt(nonce, data, self._aad(message_id, part))
        return bytes((MAGIC, self.current)) + nonce + ct

    def seal_many(self, items: list[bytes], ids: bytes, part: bytes) -> list[bytes]:
        """Seal a batch; ``ids`` is the 16-byte message ids concatenated."""
        if self.current is None:
            return [self.seal(x, ids[16 * i:16 * i + 16], part) for i, x in enumerate(items)]
        encrypt = self.aeads[self.current].encrypt
        head, prefix = bytes((MAGIC, self.current)), self.prefix
        nonces = os.urandom(12 * len(items))
        out: list[bytes] = []
        for i, data in enumerate(items):
            if not data:
                out.append(data)
                continue
            nonce = nonces[12 * i:12 * i + 12]
            out.append(head + nonce + encrypt(nonce, data, prefix + ids[16 * i:16 * i + 16] + part))
        return out

    def open(self, data: bytes, message_id: bytes, part: bytes) -> bytes:
        if not data:
            return data
        if len(data) < OVERHEAD or data[0] != MAGIC:
            return data  # stored before the queue was encrypted
        aead = self.aeads.get(data[1])
        if aead is None:
            raise Unavailable(f"queue {self.queue!r}: no key with id {data[1]} in this host's "
                              "--key-dir (rotated away too early?): put the key back in the "
                              f"{self.queue}.key file and restart the host", queue=self.queue,
                              missing_key=True)
        try:
            return aead.decrypt(data[2:HEADER], data[HEADER:], self._aad(message_id, part))
        except InvalidTag:
            raise Unavailable(f"queue {self.queue!r}: a payload failed authentication",
                              queue=self.queue) from None


class KeyDir:
    """The host's key directory; ciphers are built on first use and cached."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self.cache: dict[str, PayloadCipher] = {}

    def cipher(self, queue: str) -> PayloadCipher:
        c = self.cache.get(queue)
        if c is None:
            keys: dict[int, bytes] = {}
            problem = None
            if self.path is not None and key_path(self.path, queue).exists():
                try:
                    keys = read_keys(key_path(self.path, queue))
                except (ConfigError, OSError) as exc:  # the stream still opens, and says why
                    problem = f"fix {key_path(self.path, queue)}: {exc}"
            if self.path is None:
                problem = (f"it runs without --key-dir: start it with --key-dir DIR holding {queue}.key, "
                           f"made by `zmqueue keys data-key --queue {queue} --key-dir DIR` (the hosts of "
                           "`zmqueue up --secure` use <its --data-dir>/atrest)")
            current = max(keys) if keys else None
            c = self.cache[queue] = PayloadCipher(queue, keys, current, problem)
        return c

    def reload(self) -> None:
        self.cache.clear()
