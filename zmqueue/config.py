"""Configuration as validated frozen dataclasses.

Defaults are documented where they are defined. Environment variables are
read in exactly one place: :func:`from_env`.

Units are last in names: ``visibility_timeout_s``, ``heartbeat_interval_ms``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from zmqueue.errors import ConfigError

QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,80}(\.fifo)?$")
"""Queue names: 1-80 of letters, digits, ``-`` and ``_`` (SQS rules); FIFO
queue names may end in ``.fifo``."""

MAX_MESSAGE_BYTES_LIMIT = 1024 * 1024
"""Upper bound for a queue's ``max_message_bytes`` (1 MiB)."""

FSYNC_POLICIES = ("always", "interval", "never")
SYNC_QUORUMS = ("majority", "all")
"""``QueueConfig.sync_quorum``: which replicas a synchronous write waits for."""
MAX_VISIBILITY_S = 43200
"""12 h, as SQS: the longest a received message stays invisible (queue
default, per receive, per change_visibility)."""


def acks_needed(voters: int, sync_quorum: str) -> int:
    """How many of ``voters`` replicas (the writer included) hold a record
    before a synchronous write of it is acknowledged: a majority, or all of
    them (``sync_quorum="all"``). The data plane's acks, the writer election
    and the confirmation of replica-set changes all count with this."""
    return voters if sync_quorum == "all" else voters // 2 + 1


def _check(cond: bool, name: str, why: str) -> None:
    if not cond:
        raise ConfigError(f"invalid {name}: {why}", field=name)


def _check_range(value: int | float, name: str, lo: float, hi: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and lo <= value <= hi
    _check(ok, name, f"must be a number between {lo} and {hi}, got {value!r}")


def _check_int_range(value: int, name: str, lo: int, hi: int) -> None:
    """A whole number in [lo, hi] (seconds, bytes, counts: 1.5 or True is refused)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    _check(ok, name, f"must be a whole number between {lo} and {hi}, got {value!r}")


IDENT_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""Cluster names, node ids, key names: what may stand in a KV key's path segment."""


def validate_ident(value: object, field_name: str) -> str:
    """``value`` if it is 1-64 of ``[A-Za-z0-9_.-]``, else ConfigError."""
    if not isinstance(value, str) or IDENT_RE.fullmatch(value) is None:
        raise ConfigError(f"invalid {field_name}: use 1-64 of [A-Za-z0-9_.-], got {value!r}",
                          field=field_name)
    return value


def validate_queue_name(name: object, setting: str = "name") -> str:
    """``name`` if it is a valid queue name, else ConfigError naming ``setting``
    (the queue's own ``name``, or a setting that names a queue)."""
    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        what = "queue name" if setting == "name" else f"{setting} (a queue name)"
        raise ConfigError(
            f"invalid {what} {name!r:.100}: use 1-80 letters, digits, '-' or '_'"
            " (FIFO queues may end in '.fifo')",
            field=setting,
        )
    return name


NOT_SETTINGS = frozenset({"extra", "incarnation", "given"})
"""QueueConfig fields that are not in its JSON."""

EXTRA_DEPTH_MAX = 16
"""Deepest nesting of lists and maps in the value of an unknown config key."""
QUEUE_CONFIG_BYTES_MAX = 64 * 1024
"""Largest queue config, as the JSON stored in Consul KV (whose values are
refused over 512 KiB), unknown keys included."""


def check_extra(extra: dict[Any, Any]) -> None:
    """ConfigError naming the key unless the unknown config keys ``extra`` can
    be stored as JSON: string keys (at every level), values of nil, bool,
    int, finite float, str, list or map, nested at most
    :data:`EXTRA_DEPTH_MAX` deep. (The size: ``kvlayout.encode_queue_config``.)"""
    for key, top in extra.items():
        if not isinstance(key, str):
            raise ConfigError(f"queue config key {key!r:.40} is not a string; config keys are strings",
                              field="config")
        todo: list[tuple[Any, int]] = [(top, 1)]
        while todo:
            value, depth = todo.pop()
            if isinstance(value, dict | list) and depth > EXTRA_DEPTH_MAX:
                raise ConfigError(f"invalid {key}: unknown config keys are kept as they are, but this "
                                  f"value nests lists or maps over {EXTRA_DEPTH_MAX} deep", field=key)
            if isinstance(value, dict):
                if not all(isinstance(k, str) for k in value):
                    raise ConfigError(f"invalid {key}: a map in it has a key that is not a string "
                                      "(it is stored as JSON)", field=key)
                todo.extend((v, depth + 1) for v in value.values())
            elif isinstance(value, list):
                todo.extend((v, depth + 1) for v in value)
            elif isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"invalid {key}: {value} cannot be stored as JSON", field=key)
            elif value is not None and not isinstance(value, bool | int | float | str):
                raise ConfigError(f"invalid {key}: unknown config keys are stored as JSON; a "
                                  f"{type(value).__name__} cannot be (give a string, number, bool, nil, "
                                  "list or map)", field=key)


@dataclass(frozen=True)
class QueueConfig:
    """A queue's configuration, as stored in Consul KV (JSON).

    Defaults follow SQS: 30 s visibility timeout, 4 days retention, 256 KiB
    messages, no delay.
    """

    name: str
    fifo: bool = False
    visibility_timeout_s: int = 30
    """0..43200 (12 h). How long a received message stays invisible."""
    retention_s: int = 4 * 86400
    """1..1209600 (14 days; SQS allows 60 s at least, zmqueue 1 s for short-lived
    queues and tests). Messages older than this are dropped."""
    delay_s: int = 0
    """0..900. Default delivery delay of every message of the queue."""
    max_message_bytes: int = 262144
    """1024..1 MiB. Largest body + attributes accepted."""
    dead_letter_queue: str | None = None
    max_receive_count: int = 5
    """1..1000. Receives after which a message moves to the dead-letter queue."""
    partitions: int = 1
    replication_factor: int = 1
    sync_replication: bool = True
    sync_quorum: str = "majority"
    """Which replicas a synchronous write waits for (:data:`SYNC_QUORUMS`):
    ``majority`` (⌊R/2⌋+1: an acknowledged write survives the loss of any
    minority of its replicas, and writes go on while a minority is down) or
    ``all`` (every voting replica: it survives the loss of any R-1, and
    writes stop while any replica is down). Fixed at creation; no effect
    while ``sync_replication`` is off. docs/REPLICATION.md, Guarantees."""
    content_based_dedup: bool = False
    """FIFO only: deduplicate by a hash of the body when no dedup id is given."""
    fsync: str = "interval"
    """Durability policy: ``always`` | ``interval`` | ``never`` (see docs/SEGMENT_FORMAT.md)."""
    max_messages: int | None = None
    """Optional cap on stored messages; sends past it get QueueLimitReached."""
    encrypted: bool = False
    """Seal message payloads at rest with the queue's key from each host's
    ``--key-dir`` (docs/SECURITY.md)."""
    rate_limit_per_s: float | None = None
    """Requests per second the whole queue takes on each host (None = unlimited)."""
    client_rate_limit_per_s: float | None = None
    """Requests per second one client identity may make on the queue, per host."""
    rate_burst: int | None = None
    """Bucket size of both limits (default: one second's worth)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Unknown keys found in KV, kept and reported, never fatal."""
    incarnation: int = 0
    """Which queue of this name: the ``CreateIndex`` of its config key in
    Consul (a queue deleted and created again gets a new one), set when a
    snapshot of KV is read; 0 = not known. Not a setting: never in the
    config's JSON. Receipts carry it (docs/PROTOCOL.md, Receipt handles)."""
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """The settings its JSON named (:meth:`from_dict`; the others took their
    defaults): a KV edit that drops one (a typo in its name) is caught by
    comparing with the config before (``kvhealth.fixed_setting_edits``)."""

    def validate(self) -> QueueConfig:
        validate_queue_name(self.name)
        _check(isinstance(self.fifo, bool), "fifo", "must be true or false")
        _check_int_range(self.visibility_timeout_s, "visibility_timeout", 0, MAX_VISIBILITY_S)
        _check_int_range(self.retention_s, "retention", 1, 1209600)
        _check_int_range(self.delay_s, "delay", 0, 900)
        _check_int_range(self.max_message_bytes, "max_message_bytes", 1024, MAX_MESSAGE_BYTES_LIMIT)
        _check_int_range(self.max_receive_count, "max_receive_count", 1, 1000)
        _check_int_range(self.partitions, "partitions", 1, 64)
        _check_int_range(self.replication_factor, "replication_factor", 1, 5)
        _check(isinstance(self.sync_replication, bool), "sync_replication", "must be a bool")
        _check(self.sync_quorum in SYNC_QUORUMS, "sync_quorum",
               f"must be one of {SYNC_QUORUMS}, got {self.sync_quorum!r:.40}")
        _check(self.fsync in FSYNC_POLICIES, "fsync", f"must be one of {FSYNC_POLICIES}")
        if self.max_messages is not None:
            _check_int_range(self.max_messages, "max_messages", 1, 10**12)
        _check(isinstance(self.encrypted, bool), "encrypted", "must be true or false")
        _check(isinstance(self.content_based_dedup, bool), "content_based_dedup", "must be true or false")
        for rate in ("rate_limit_per_s", "client_rate_limit_per_s"):
            if getattr(self, rate) is not None:
                _check_range(getattr(self, rate), rate, 0.001, 1e7)
        if self.rate_burst is not None:
            _check_int_range(self.rate_burst, "rate_burst", 1, 10**7)
        if self.dead_letter_queue is not None:
            validate_queue_name(self.dead_letter_queue, "dead_letter_queue")
            _check(self.dead_letter_queue != self.name, "dead_letter_queue", "must differ from the queue")
        if self.name.endswith(".fifo"):
            _check(self.fifo, "fifo", "a queue named '*.fifo' must be created with fifo=True")
        _check(not self.content_based_dedup or self.fifo, "content_based_dedup", "is for FIFO queues")
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        d.pop("incarnation")
        d.pop("given")
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueConfig:
        """Build from a JSON object; unknown keys go to ``extra``; validates."""
        if not isinstance(data, dict):
            raise ConfigError("queue config must be a JSON object", field="config")
        if "name" not in data:
            raise ConfigError("queue config needs the queue's name (name)", field="name")
        kwargs = {k: v for k, v in data.items() if k in QUEUE_SETTINGS}
        extra = {k: v for k, v in data.items() if k not in QUEUE_SETTINGS}
        try:
            cfg = cls(**kwargs, extra=extra, given=frozenset(kwargs))
        except TypeError as exc:
            raise ConfigError(f"queue config: {exc}", field="config") from exc
        return cfg.validate()

    def same_settings(self, other: QueueConfig) -> bool:
        return self.to_dict() == other.to_dict()

    def updated(self, changes: dict[str, Any]) -> QueueConfig:
        """This config with ``changes`` (config field names, as in KV) applied
        and validated. Only the settings of :data:`MUTABLE_SETTINGS` may change:
        ConfigError naming any other (:data:`FIXED_AT_CREATION` never change;
        placement, partitions and replication, only by a KV edit)."""
        if not isinstance(changes, dict) or not changes:
            raise ConfigError("give at least one setting to change", field="changes")
        if not all(isinstance(k, str) for k in changes):
            raise ConfigError("the names of settings to change must be strings", field="changes")
        settable = set(MUTABLE_SETTINGS.values())
        fixed = sorted(k for k in changes if k not in settable)
        if fixed:
            unknown = [k for k in fixed if k not in QUEUE_SETTINGS]
            if unknown:
                shown = ", ".join(f"{k!r:.40}" for k in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
                raise ConfigError(f"unknown queue settings [{shown}]; settable: {sorted(settable)}",
                                  field="changes")
            if any(k in FIXED_AT_CREATION for k in fixed):
                raise ConfigError(f"{', '.join(fixed)} cannot change after a queue is created; "
                                  "create a new queue (and redrive or copy its messages)", field=fixed[0])
            raise ConfigError(f"{', '.join(fixed)} cannot be set here: placement settings change by "
                              "editing the queue's config in Consul KV (the managers place the "
                              "difference; partitions can only be added)", field=fixed[0])
        return QueueConfig.from_dict({**self.to_dict(), **self.extra, **changes})


FIXED_AT_CREATION = ("name", "fifo", "encrypted", "sync_quorum")
"""Settings no change may touch, by any path: the streams were opened, and
their messages written, as that type and with that encryption, and
acknowledged on that quorum (the writer election counts on it: after a
change from ``majority`` to ``all`` it would elect a replica without records
a majority acknowledged; a host refuses a KV edit of them, see
``controlplane/kvhealth.py``)."""
QUEUE_SETTINGS = frozenset(f.name for f in fields(QueueConfig)) - NOT_SETTINGS
"""The names of a queue config's settings, as in its JSON in KV."""

MUTABLE_SETTINGS: dict[str, str] = {
    "visibility_timeout": "visibility_timeout_s",
    "retention": "retention_s",
    "delay": "delay_s",
    "max_message_bytes": "max_message_bytes",
    "dead_letter_queue": "dead_letter_queue",
    "max_receive_count": "max_receive_count",
    "content_based_dedup": "content_based_dedup",
    "fsync": "fsync",
    "max_messages": "max_messages",
    "rate_limit_per_s": "rate_limit_per_s",
    "client_rate_limit_per_s": "client_rate_limit_per_s",
    "rate_burst": "rate_burst",
}
"""What ``Queue.set_attributes`` may change (its keyword -> the config field,
as stored in Consul KV). Hosts apply a change to their open streams within a
second or two (the metadata watch)."""


@dataclass(frozen=True)
class HostConfig:
    """One ``zmqueue host`` process."""

    cluster: str
    node: str
    data_dir: str
    consul: tuple[str, ...] = ("127.0.0.1:8500",)
    """Consul HTTP addresses, tried in order (failover)."""
    bind_host: str = "127.0.0.1"
    client_port: int = 0
    """ROUTER for clients; 0 = pick a free port."""
    pub_port: int = 0
    """PUB for replication; 0 = free."""
    peer_port: int = 0
    """ROUTER for peers (catch-up); 0 = free."""
    http_port: int = 0
    """HTTP health/metrics endpoint; 0 = free."""
    zone: str = ""
    heartbeat_interval_ms: int = 1000
    check_ttl_ms: int = 3000
    """Consul TTL check: the host goes critical this long after its last heartbeat."""
    consul_timeout_ms: int = 2000
    """HTTP timeout of every Consul call."""
    curve_secret_file: str | None = None
    """This host's CURVE key pair (a ``.key_secret`` file). Set: every socket
    uses CURVE and only keys registered in Consul KV may connect. None (the
    local demo's default): plaintext and unauthenticated (docs/SECURITY.md)."""
    key_dir: str | None = None
    """Directory of per-queue at-rest keys (``<queue>.key``); never the data dir."""
    usage_flush_interval_ms: int = 10_000
    """How often usage records are appended to ``<data_dir>/usage.jsonl``."""
    min_free_disk_mb: int = 64
    """Free space (MiB) kept on the data directory's disk: below it the host
    refuses new messages with DISK_FULL while receives, deletes and replicated
    records still get written, so consumers can drain (like RabbitMQ's
    ``disk_free_limit``). 0: refuse only after a write failed for lack of space."""

    segment_roll_ms: int = 3_600_000
    """A stream's active segment rolls once its first record is this old (or
    the queue's retention, if shorter, but at least a minute), so compaction
    removes consumed and expired messages from disk: at the next write, or
    on an idle stream by a record of its writer (docs/SEGMENT_FORMAT.md, "Files");
    a FIFO queue's once they are also older than its 5-minute dedup window."""
    outage_grace_ms: int = 60_000
    """While Consul is unreachable, the host's writers keep their streams this
    long (no other host can be elected meanwhile), then stop until it is back
    (docs/REPLICATION.md; ``leadership.OUTAGE_GRACE_S``)."""

    @property
    def min_free_bytes(self) -> int:
        """``min_free_disk_mb`` in bytes: the storage engine's and the ``disk:`` check's reserve."""
        return self.min_free_disk_mb << 20

    def validate(self) -> HostConfig:
        validate_ident(self.cluster, "cluster")
        validate_ident(self.node, "node")
        _check(bool(self.data_dir), "data_dir", "must be a directory path")
        check_consul_addresses(self.consul)
        for name in ("client_port", "pub_port", "peer_port", "http_port"):
            _check_int_range(getattr(self, name), name, 0, 65535)
        _check_int_range(self.heartbeat_interval_ms, "heartbeat_interval_ms", 100, 10000)
        _check_int_range(self.check_ttl_ms, "check_ttl_ms", 1000, 60000)
        _check(self.check_ttl_ms >= 2 * self.heartbeat_interval_ms, "check_ttl_ms",
               "must be at least twice heartbeat_interval_ms")
        _check_int_range(self.consul_timeout_ms, "consul_timeout_ms", 100, 60000)
        _check_int_range(self.usage_flush_interval_ms, "usage_flush_interval_ms", 100, 3_600_000)
        _check_int_range(self.min_free_disk_mb, "min_free_disk_mb", 0, 1 << 30)
        _check_int_range(self.segment_roll_ms, "segment_roll_ms", 1000, 1 << 62)
        _check_int_range(self.outage_grace_ms, "outage_grace_ms", 1000, 3_600_000)
        if self.key_dir is not None:
            keys, data = Path(os.path.realpath(self.key_dir)), Path(os.path.realpath(self.data_dir))
            _check(keys != data and not keys.is_relative_to(data), "key_dir",
                   "must not be the data directory or inside it (keys are never stored beside the data: "
                   "a copy of the data would carry its keys)")
        return self


_CONSUL_ADDRESS = re.compile(r"^[A-Za-z0-9_.-]+:(\d{1,5})$")


def check_consul_addresses(addrs: Sequence[str]) -> tuple[str, ...]:
    """``addrs`` as a tuple if each is ``HOST:PORT`` (port 1-65535), else ConfigError."""
    _check(len(addrs) > 0, "consul", "give at least one HOST:PORT, e.g. 127.0.0.1:8500")
    for addr in addrs:
        m = _CONSUL_ADDRESS.fullmatch(addr) if isinstance(addr, str) else None
        _check(m is not None and 1 <= int(m.group(1)) <= 65535, "consul",
               f"{addr!r} is not HOST:PORT (e.g. 127.0.0.1:8500)")
    return tuple(addrs)


def parse_consul_addresses(value: str | None) -> tuple[str, ...]:
    """``"a:1,b:2"`` -> ``("a:1", "b:2")``; strips ``http://``."""
    if not value:
        return ()
    out = []
    for part in value.split(","):
        part = part.strip().removeprefix("http://")
        if part:
            out.append(part)
    return tuple(out)


def from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The one place environment variables are read.

    - ``CONSUL_HTTP_ADDR``: default Consul address(es), comma separated.
    - ``ZMQUEUE_CONSUL_BIN``: path of the consul binary.
    - ``ZMQUEUE_CACHE``: cache directory (default ``~/.cache/zmqueue``).
    """
    env = os.environ if environ is None else environ
    cache = env.get("ZMQUEUE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "zmqueue")
    return {
        "consul": parse_consul_addresses(env.get("CONSUL_HTTP_ADDR")) or ("127.0.0.1:8500",),
        "consul_bin": env.get("ZMQUEUE_CONSUL_BIN") or None,
        "cache_dir": cache,
    }
