"""CURVE key files and socket options.

Key files are ZeroMQ certificates as written by :func:`zmq.auth.create_certificates`:
``NAME.key`` holds the public key, ``NAME.key_secret`` both keys (keep it
private: mode 0600). Keys are z85 text (40 characters).

:class:`CurveKeys` is one party's key pair plus the servers' public keys it
knows, by endpoint; :meth:`CurveKeys.client` sets the client-side options on
a socket just before it connects (options are captured per connect, so one
SUB socket can connect to several servers with different keys).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.auth

from zmqueue.errors import ConfigError, Unavailable

log = logging.getLogger(__name__)

Z85_KEY_LEN = 40


def generate(out_dir: str | Path, name: str, force: bool = False) -> tuple[Path, Path]:
    """Write ``NAME.key`` and ``NAME.key_secret`` into ``out_dir`` (the
    secret created 0600: never readable by others, not even for a moment).
    An existing pair is kept unless ``force``: a new one locks out whoever
    was registered with the old public key."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    existing = [p for p in (out / f"{name}.key", out / f"{name}.key_secret") if p.exists()]
    if existing and not force:
        raise ConfigError(f"{existing[0]} exists: a new pair would lock out the identity registered with "
                          "it; pass --force to replace it (then register the new public key)", field="out")
    old = os.umask(0o077)  # (pyzmq writes the files with the umask: none for group and others)
    try:
        pub, sec = zmq.auth.create_certificates(str(out), name)
    finally:
        os.umask(old)
    os.chmod(sec, 0o600)
    os.chmod(pub, 0o644)
    return Path(pub), Path(sec)


def load_public(path: str | Path) -> bytes:
    """The z85 public key of a ``.key`` or ``.key_secret`` file (or a bare z85 line)."""
    p = Path(path)
    try:
        text = p.read_text().strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{p} is not a key file (not text)", field="key") from None
    except OSError as exc:
        raise ConfigError(f"cannot read key file {p}: {exc.strerror}", field="key") from None
    if len(text) == Z85_KEY_LEN and "\n" not in text:
        return check_key(text)
    try:
        public, _ = zmq.auth.load_certificate(str(p))
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} is not a ZeroMQ certificate: {exc}", field="key") from None
    return check_key(public)


def load_secret(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a ``.key_secret`` file."""
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot load the secret key file {path}: {exc}", field="curve_secret") from None
    if not secret:
        raise ConfigError(f"{path} holds no secret key (pass the .key_secret file)", field="curve_secret")
    with contextlib.suppress(OSError):
        if os.stat(path).st_mode & 0o077:
            log.warning("%s is readable by other users (mode %o): chmod 600 it", path,
                        os.stat(path).st_mode & 0o777)
    return check_key(public), check_key(secret)


def check_key(key: bytes | str) -> bytes:
    raw = key.encode(errors="replace") if isinstance(key, str) else key
    try:
        if len(raw) != Z85_KEY_LEN or len(zmq.utils.z85.decode(raw)) != 32:
            raise ValueError
    except (ValueError, KeyError, struct.error):  # (z85.decode: KeyError or struct.error on bad characters)
        raise ConfigError(f"{raw[:48]!r} is not a z85 CURVE key (40 characters)", field="key") from None
    return raw


def server(sock: zmq.Socket[bytes], public: bytes, secret: bytes, domain: str) -> None:
    """Make ``sock`` a CURVE server whose peers are checked by ZAP in ``domain``."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())


@dataclass
class CurveKeys:
    """A key pair and the known servers' public keys (endpoint -> z85)."""

    public: bytes
    secret: bytes
    servers: dict[str, bytes] = field(default_factory=dict)
    default_server: bytes | None = None
    """Used for an endpoint with no entry (a cluster sharing one server key)."""
    pinned: bool = False
    """The server keys were given (``curve_server_keys``): what Consul
    publishes is not learnt, so a key registered there cannot stand in for
    a pinned one."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_file(cls, secret_file: str | Path) -> CurveKeys:
        public, secret = load_secret(secret_file)
        return cls(public, secret)

    def pin(self, servers: dict[str, bytes] | None = None, default: bytes | None = None) -> None:
        """Use these server keys only (an endpoint -> key map, and/or one key
        for every endpoint); :meth:`learn` changes nothing from then on."""
        with self.lock:
            self.servers, self.default_server, self.pinned = dict(servers or {}), default, True

    def learn(self, servers: dict[str, bytes]) -> None:
        """The keys the hosts publish in Consul (ignored when pinned)."""
        with self.lock:
            if not self.pinned:
                self.servers.update(servers)

    def server_key(self, endpoint: str) -> bytes | None:
        with self.lock:
            return self.servers.get(endpoint, self.default_server)

    def client(self, sock: zmq.Socket[bytes], endpoint: str) -> None:
        """Set the CURVE client options for a connect to ``endpoint``."""
        key = self.server_key(endpoint)
        if key is None:
            raise Unavailable(f"no CURVE public key is known for {endpoint}: the host publishes it "
                              "in its Consul service meta (curve_public)", endpoint=endpoint)
        sock.setsockopt(zmq.CURVE_SERVERKEY, key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
