"""The Consul KV layout of zmqueue: key builders and JSON value codecs.

Every key lives under :data:`PREFIX` (``zmqueue/``); docs/CONSUL_KV.md is the
reference (value schemas, writers, readers, what an operator may edit)::

    zmqueue/queues/<queue>/config                QueueConfig JSON
    zmqueue/queues/<queue>/partitions/<p>        {"cluster", "replicas", "version", "joining",
                                                  "leaving", "previous"}
    zmqueue/leaders/<queue>/<p>/<origin>         stream writer lock; {"node", "endpoint", "epoch"}
    zmqueue/leaders/<queue>/<p>, positions/<queue>/<p>/<node>   per-partition forms
                                                 (the pure election model; still decoded)
    zmqueue/managers/external                    lock; {"node", "since_ms"}
    zmqueue/managers/cluster/<cluster>           lock; {"node", "since_ms"}
    zmqueue/hosts/<node>/drain                   true | false

    zmqueue-positions/<queue>/<p>/<origin>/<node> {"epoch", "seq", "seen", "confirmed", "opened"}
    zmqueue-positions/<queue>/<p>/~unserved/<node> {"unserved": 1}: node does not serve the queue

Replicas' positions change with every write, so they live beside the tree
(:data:`POSITIONS_PREFIX`), not in it: the hosts and managers watch
``zmqueue/`` with blocking queries, and a position write inside it would wake
every watcher of every host to re-read the whole tree twice a second.

Hosts themselves are not in KV: the service catalog (tags and meta: cluster,
zone, endpoints) is the membership list, and its health checks say who is up.

Error style: **decoders never raise**. ``decode_*(key, raw)`` returns either
the typed value or a :class:`Malformed` naming the key and the reason, so a
reader reports the problem (host log, warning check) and skips the key. Unknown
JSON fields are kept in ``extra`` and written back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypeVar

from zmqueue.config import QUEUE_CONFIG_BYTES_MAX, QueueConfig, check_extra
from zmqueue.errors import ConfigError, ZmqueueError
from zmqueue.numbers import digits
from zmqueue.security.authz import MALFORMED, parse_policy

PREFIX = "zmqueue/"
POSITIONS_PREFIX = "zmqueue-positions/"
"""Stream positions: outside :data:`PREFIX` so that their churn wakes no
watcher of the configuration tree."""
VALUE_BYTES_MAX = 512 * 1024
"""Consul's own KV value limit; larger values are reported as malformed."""

T = TypeVar("T")


class PartitionId(NamedTuple):
    """One partition of one queue: ``PartitionId("orders", 3)``."""

    queue: str
    partition: int


@dataclass(frozen=True, order=True)
class Position:
    """A replica's durable position. Compared lexicographically by
    (epoch, seq): a record of a later epoch is ahead of any record of an
    earlier one."""

    epoch: int = 0
    seq: int = 0


ZERO = Position(0, 0)


@dataclass(frozen=True)
class Malformed:
    """A key whose value could not be decoded, or would do harm if applied;
    reported, then skipped (its last good value kept)."""

    key: str
    reason: str
    keep: bool = True
    """False: a warning only, the value applies as it is (a queue config
    naming a dead-letter queue deleted since: nothing earlier to keep)."""


@dataclass(frozen=True)
class PartitionAssignment:
    """Where a partition lives: its cluster and its ordered replica hosts.
    ``version`` grows by one on every change (readers ignore older ones)."""

    cluster: str
    replicas: tuple[str, ...]
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    joining: tuple[str, ...] = ()
    """Replicas added to a partition that holds records and not yet caught up
    (a subset of ``replicas``; JSON field written only when non-empty). They
    take every write like the others, but they are not *voters*: the writer
    election counts what a majority of the voters hold, so a replica that
    joined empty never takes over from replicas that are only down. The
    internal manager clears them once they hold what the voters hold."""
    leaving: tuple[str, ...] = ()
    """While a change of the voters is confirmed (``previous`` set): the
    replicas of ``previous`` that the change removes. They keep their copies
    and count in ``previous``'s majority, but are not voters of the new set;
    the manager drops them once the change is confirmed."""
    previous: tuple[str, ...] = ()
    """The voters before a change of the voters, until every stream's writer
    has confirmed that a majority of the new voters holds every record it may
    have acknowledged under them (joint consensus: meanwhile a sync ack and
    an election need a majority of both). A subset of ``replicas``; empty
    when no change is in flight."""

    @property
    def voters(self) -> tuple[str, ...]:
        """The voters of this set (of the new set while a change is in flight)."""
        return voters_of(self.replicas, (*self.joining, *self.leaving))

    @property
    def target(self) -> tuple[str, ...]:
        """The replicas once a change in flight is confirmed (``leaving`` dropped)."""
        return tuple(n for n in self.replicas if n not in self.leaving)


def voters_of(replicas: Iterable[str], joining: Iterable[str]) -> tuple[str, ...]:
    """The replicas that are not joining (empty when every one is), in order,
    each once: whom the writer election and the keepers rule count."""
    skip = set(joining)
    return tuple(n for n in dict.fromkeys(replicas) if n not in skip)


@dataclass(frozen=True)
class LeaderRecord:
    """Value of a partition's leader lock. ``epoch`` is the lock's LockIndex."""

    node: str
    endpoint: str
    epoch: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ManagerRecord:
    """Value of a manager lock: who holds the role, since when (ms epoch)."""

    node: str
    since_ms: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


# ---- key builders -------------------------------------------------------------


def key_parts(key: str) -> list[str]:
    """The parts of a key under :data:`PREFIX` (``["queues", q, "config"]``);
    none for any other key."""
    return key[len(PREFIX):].split("/") if key.startswith(PREFIX) else []


def config_queue(key: str) -> str | None:
    """The queue whose config ``key`` is, if it is a queue config key."""
    match key_parts(key):
        case ["queues", q, "config"] if q:
            return q
    return None


def queue_config_key(queue: str) -> str:
    return f"{PREFIX}queues/{queue}/config"


def partition_key(pid: PartitionId) -> str:
    return f"{PREFIX}queues/{pid.queue}/partitions/{pid.partition}"


def leader_key(pid: PartitionId) -> str:
    return f"{PREFIX}leaders/{pid.queue}/{pid.partition}"


def stream_leader_key(pid: PartitionId, origin: str) -> str:
    """Writer lock of one replication stream of a partition: ``fifo`` for a
    FIFO partition, the origin host's node id for a standard queue's stream."""
    return f"{PREFIX}leaders/{pid.queue}/{pid.partition}/{origin}"


def stream_position_key(pid: PartitionId, origin: str, node: str) -> str:
    return f"{POSITIONS_PREFIX}{pid.queue}/{pid.partition}/{origin}/{node}"


ACKED_NODE = "~acked"
"""The last part of :func:`stream_acked_key` (no node id has a ``~``)."""


def stream_acked_key(pid: PartitionId, origin: str) -> str:
    """Beside a stream's positions, written by its writer when the stream has
    ``sync_quorum="all"``: the highest seq every voter holds (it only grows;
    :func:`decode_stream_acked`)."""
    return f"{POSITIONS_PREFIX}{pid.queue}/{pid.partition}/{origin}/{ACKED_NODE}"


UNSERVED_ORIGIN = "~unserved"
"""The origin part of :func:`unserved_key` (no node id has a ``~``, so no stream's)."""


def unserved_key(pid: PartitionId, node: str) -> str:
    """Beside a partition's stream positions, written by ``node`` while it
    does not serve the partition's queue (it started while the queue's config
    was bad, and knows no good value of it): it keeps none of the queue's
    streams, so the writer election and the internal manager treat it as down
    for them, whatever its published positions say (``{"unserved": 1}``;
    deleted by the host once it serves the queue; :func:`decode_unserved`)."""
    return f"{POSITIONS_PREFIX}{pid.queue}/{pid.partition}/{UNSERVED_ORIGIN}/{node}"


def position_key(pid: PartitionId, node: str) -> str:
    return f"{PREFIX}positions/{pid.queue}/{pid.partition}/{node}"


def external_manager_key() -> str:
    return f"{PREFIX}managers/external"


def cluster_manager_key(cluster: str) -> str:
    return f"{PREFIX}managers/cluster/{cluster}"


def drain_key(node: str) -> str:
    return f"{PREFIX}hosts/{node}/drain"


def deleted_key(queue: str) -> str:
    """The tombstone DELETE_QUEUE writes: ``{"incarnation": N, "at_ms": T}``.
    Hosts remove a queue's data only for a deletion named here; a queue that
    vanishes from KV otherwise (its config key deleted by hand, Consul's state
    lost) keeps its data on disk."""
    return f"{PREFIX}deleted/{queue}"


def encode_tombstone(incarnation: int, at_ms: int, by: str | None = None) -> bytes:
    """``by``: the deleting request's token (a retry of it finds its own deletion)."""
    tomb: dict[str, Any] = {"incarnation": incarnation, "at_ms": at_ms}
    if by is not None:
        tomb["by"] = by
    return _dump(tomb)


def tombstone_token(raw: bytes | None) -> str | None:
    """The token of the DELETE_QUEUE a tombstone records (None: none, or unreadable)."""
    try:
        by = _load_object(raw).get("by")
    except (_Bad, ZmqueueError, TypeError, ValueError, AttributeError):
        return None
    return by if isinstance(by, str) else None


def decode_tombstone(key: str, raw: bytes | None) -> int | Malformed:
    """The incarnation (config ``CreateIndex``) of the queue a tombstone deleted."""
    return _guard(key, raw, lambda d: _int(d, "incarnation"))


# ---- encoders -----------------------------------------------------------------


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def encode_queue_config(cfg: QueueConfig) -> bytes:
    """The config's JSON; ConfigError naming the field if an unknown key
    (``extra``) cannot be stored as JSON or the whole is over
    ``QUEUE_CONFIG_BYTES_MAX`` (Consul refuses a value over 512 KiB)."""
    check_extra(cfg.extra)
    raw = _dump({**cfg.extra, **cfg.to_dict()})
    if len(raw) > QUEUE_CONFIG_BYTES_MAX:
        big = max(cfg.extra, key=lambda k: len(_dump(cfg.extra[k])), default="config")
        raise ConfigError(f"queue config is {len(raw)} bytes as JSON, over the {QUEUE_CONFIG_BYTES_MAX}-byte "
                          f"limit; its largest unknown key is {big!r}: make it smaller or drop it", field=big)
    return raw


def encode_assignment(a: PartitionAssignment) -> bytes:
    return _dump({**a.extra, "cluster": a.cluster, "replicas": list(a.replicas),
                  "version": a.version, **({"joining": list(a.joining)} if a.joining else {}),
                  **({"leaving": list(a.leaving)} if a.leaving else {}),
                  **({"previous": list(a.previous)} if a.previous else {})})


def encode_leader(rec: LeaderRecord) -> bytes:
    return _dump({**rec.extra, "node": rec.node, "endpoint": rec.endpoint, "epoch": rec.epoch})


def encode_position(pos: Position, seen: int = 0, confirmed: int = 0, opened: bool = False) -> bytes:
    """``seen``: Consul's index of the stream lock's release the host saw
    before taking this position (0: none; see ``writer_election.heard_enough``).
    ``confirmed``: written by the stream's writer, the highest partition
    assignment version whose change of the voters it has confirmed (0: none;
    see ``PartitionAssignment.previous``). ``opened``: the host has written
    the stream and may have acknowledged records of it that no position
    shows yet (a writer acknowledges a stream's first records only once this
    is in Consul; see :func:`decode_stream_opened`)."""
    return _dump({"epoch": pos.epoch, "seq": pos.seq, **({"seen": seen} if seen else {}),
                  **({"confirmed": confirmed} if confirmed else {}), **({"opened": 1} if opened else {})})


def encode_acked(seq: int) -> bytes:
    """The value of :func:`stream_acked_key`."""
    return _dump({"seq": seq})


def encode_manager(rec: ManagerRecord) -> bytes:
    return _dump({**rec.extra, "node": rec.node, "since_ms": rec.since_ms})


def encode_drain(draining: bool) -> bytes:
    return _dump(draining)


# ---- decoders (never raise) ---------------------------------------------------


class _Bad(Exception):
    """Internal: a decode step failed; turned into :class:`Malformed`."""


def _load_object(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        raise _Bad("empty value")
    if len(raw) > VALUE_BYTES_MAX:
        raise _Bad(f"value of {len(raw)} bytes exceeds {VALUE_BYTES_MAX}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _Bad(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _Bad(f"expected a JSON object, got {type(data).__name__}")
    return data


def _str(data: dict[str, Any], name: str) -> str:
    v = data.get(name)
    if not isinstance(v, str) or not v:
        raise _Bad(f"{name!r} must be a non-empty string")
    return v


def _int(data: dict[str, Any], name: str) -> int:
    v = data.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise _Bad(f"{name!r} must be a non-negative integer")
    return v


def _extra(data: dict[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in known}


def _guard(key: str, raw: bytes | None, build: Callable[[dict[str, Any]], T]) -> T | Malformed:
    try:
        return build(_load_object(raw))
    except _Bad as exc:
        return Malformed(key, str(exc))
    except (ZmqueueError, TypeError, ValueError, AttributeError) as exc:
        return Malformed(key, f"invalid: {exc}")


def decode_queue_config(key: str, raw: bytes | None) -> QueueConfig | Malformed:
    return _guard(key, raw, QueueConfig.from_dict)


def _build_assignment(d: dict[str, Any]) -> PartitionAssignment:
    replicas = d.get("replicas")
    if not isinstance(replicas, list) or not all(isinstance(r, str) and r for r in replicas):
        raise _Bad("'replicas' must be a list of node ids")
    if len(set(replicas)) != len(replicas):
        raise _Bad("'replicas' has duplicates")
    subsets = {}
    for name in ("joining", "leaving", "previous"):
        sub = d.get(name, [])
        if not isinstance(sub, list) or not all(isinstance(r, str) and r in replicas for r in sub):
            raise _Bad(f"'{name}' must be a list of node ids among 'replicas'")
        subsets[name] = tuple(dict.fromkeys(sub))
    if not set(subsets["leaving"]) <= set(subsets["previous"]):
        raise _Bad("'leaving' must be a list of node ids among 'previous'")
    if set(subsets["leaving"]) & set(subsets["joining"]):
        raise _Bad("a replica cannot be both 'joining' and 'leaving'")
    return PartitionAssignment(_str(d, "cluster"), tuple(replicas), _int(d, "version"),
                               _extra(d, {"cluster", "replicas", "version", *subsets}),
                               subsets["joining"], subsets["leaving"], subsets["previous"])


def decode_assignment(key: str, raw: bytes | None) -> PartitionAssignment | Malformed:
    return _guard(key, raw, _build_assignment)


def decode_leader(key: str, raw: bytes | None) -> LeaderRecord | Malformed:
    return _guard(key, raw, lambda d: LeaderRecord(
        _str(d, "node"), _str(d, "endpoint"), _int(d, "epoch"),
        _extra(d, {"node", "endpoint", "epoch"})))


def decode_position(key: str, raw: bytes | None) -> Position | Malformed:
    return _guard(key, raw, lambda d: Position(_int(d, "epoch"), _int(d, "seq")))


def _stream_positions(items: Iterable[Mapping[str, Any]] | None
                      ) -> Iterator[tuple[tuple[str, int, str], str, str, bytes | None]]:
    """(stream, node, key, raw value) of each well-shaped key of a listing under
    :data:`POSITIONS_PREFIX` (``kv.get(..., recurse=True)`` items)."""
    for stream, node, key, raw in _stream_keys(items):
        if node != ACKED_NODE and stream[2] != UNSERVED_ORIGIN:
            yield stream, node, key, raw


def _stream_keys(items: Iterable[Mapping[str, Any]] | None
                 ) -> Iterator[tuple[tuple[str, int, str], str, str, bytes | None]]:
    """(stream, last part, key, raw value) of each key of a listing under
    :data:`POSITIONS_PREFIX` shaped ``<queue>/<p>/<origin>/<last part>``."""
    for it in items or []:
        key = str(it.get("Key", ""))
        parts = key[len(POSITIONS_PREFIX):].split("/") if key.startswith(POSITIONS_PREFIX) else []
        n = digits(parts[1]) if len(parts) == 4 and all(parts) else None
        if n is not None:
            yield (parts[0], n, parts[2]), parts[3], key, it.get("Value")


def decode_stream_positions(items: Iterable[Mapping[str, Any]] | None
                            ) -> dict[tuple[str, int, str], dict[str, Position]]:
    """A listing under :data:`POSITIONS_PREFIX` as (queue, partition, origin) ->
    node -> position; keys of another shape and malformed values are skipped."""
    out: dict[tuple[str, int, str], dict[str, Position]] = {}
    for stream, node, key, raw in _stream_positions(items):
        pos = decode_position(key, raw)
        if isinstance(pos, Position):
            out.setdefault(stream, {})[node] = pos
    return out


def decode_stream_seen(items: Iterable[Mapping[str, Any]] | None
                       ) -> dict[tuple[str, int, str], dict[str, int]]:
    """The ``seen`` of every stream position in a listing under
    :data:`POSITIONS_PREFIX`, as :func:`decode_stream_positions` keys them (0
    when absent: a host of an earlier version, or no release seen)."""
    return _stream_ints(items, "seen")


def decode_stream_confirmed(items: Iterable[Mapping[str, Any]] | None
                            ) -> dict[tuple[str, int, str], dict[str, int]]:
    """The ``confirmed`` of every stream position in a listing under
    :data:`POSITIONS_PREFIX` (0 when absent: not a writer, nothing confirmed,
    or a host of an earlier version)."""
    return _stream_ints(items, "confirmed")


def decode_stream_opened(items: Iterable[Mapping[str, Any]] | None
                         ) -> dict[tuple[str, int, str], dict[str, int]]:
    """The ``opened`` mark of every stream position in a listing under
    :data:`POSITIONS_PREFIX` (1: the host has written the stream; 0 when
    absent). A stream whose positions are all at seq 0 may still hold
    acknowledged records when one is marked: positions go out about twice a
    second, but a writer acknowledges a stream's first records only once its
    mark is in Consul, so a manager that reads no record and no mark knows
    the stream holds nothing acknowledged (hosts of earlier versions write no
    mark)."""
    return _stream_ints(items, "opened")


def decode_stream_acked(items: Iterable[Mapping[str, Any]] | None) -> dict[tuple[str, int, str], int]:
    """The :func:`stream_acked_key` of every stream in a listing under
    :data:`POSITIONS_PREFIX`: the highest seq a writer of the stream said every
    voter held. A candidate of a ``sync_quorum="all"`` stream must hold that
    much (``writer_election.may_campaign``): a voter that came back without its
    disk is behind every other, and must not lead while they are down."""
    out: dict[tuple[str, int, str], int] = {}
    for stream, last, key, raw in _stream_keys(items):
        if last == ACKED_NODE:
            value = _guard(key, raw, lambda d: _int(d, "seq"))
            if isinstance(value, int) and value > 0:
                out[stream] = value
    return out


def decode_unserved(items: Iterable[Mapping[str, Any]] | None) -> dict[tuple[str, int], set[str]]:
    """The :func:`unserved_key` markers in a listing under
    :data:`POSITIONS_PREFIX`: (queue, partition) -> the nodes that do not serve
    the queue (keep none of its streams)."""
    out: dict[tuple[str, int], set[str]] = {}
    for (q, p, origin), node, _key, _raw in _stream_keys(items):
        if origin == UNSERVED_ORIGIN:
            out.setdefault((q, p), set()).add(node)
    return out


def encode_unserved() -> bytes:
    """The value of :func:`unserved_key`."""
    return _dump({"unserved": 1})


def _stream_ints(items: Iterable[Mapping[str, Any]] | None, name: str
                 ) -> dict[tuple[str, int, str], dict[str, int]]:
    out: dict[tuple[str, int, str], dict[str, int]] = {}
    for stream, node, key, raw in _stream_positions(items):
        value = _guard(key, raw, lambda d: d.get(name, 0))
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out.setdefault(stream, {})[node] = value
    return out


def decode_manager(key: str, raw: bytes | None) -> ManagerRecord | Malformed:
    return _guard(key, raw, lambda d: ManagerRecord(
        _str(d, "node"), _int(d, "since_ms"), _extra(d, {"node", "since_ms"})))


def decode_drain(key: str, raw: bytes | None) -> bool | Malformed:
    """``true``/``false`` (JSON). An empty value means not draining."""
    if raw is None or raw.strip() == b"":
        return False
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        value = None
    if isinstance(value, bool):
        return value
    return Malformed(key, "drain flag must be JSON true or false")


@dataclass(frozen=True)
class KeyRecord:
    """``zmqueue/keys/<cluster|global>/<name>``: a CURVE public key allowed in."""

    public: str
    role: str
    name: str


def key_record_key(scope: str, name: str) -> str:
    return f"{PREFIX}keys/{scope}/{name}"


def policy_key(queue: str) -> str:
    return f"{PREFIX}policies/{queue}"


def encode_key_record(rec: KeyRecord) -> bytes:
    return _dump({"public": rec.public, "role": rec.role, "name": rec.name})


def _build_key_record(d: dict[str, Any]) -> KeyRecord:
    public, role = _str(d, "public"), _str(d, "role")
    if len(public) != 40:
        raise _Bad("public must be a 40-character z85 CURVE key")
    if role not in ("client", "host"):
        raise _Bad("role must be 'client' or 'host'")
    return KeyRecord(public, role, _str(d, "name"))


def decode_key_record(key: str, raw: bytes | None) -> KeyRecord | Malformed:
    return _guard(key, raw, _build_key_record)


def decode_policy(key: str, raw: bytes | None) -> dict[str, tuple[str, ...]] | Malformed:
    def build(d: dict[str, Any]) -> dict[str, tuple[str, ...]]:
        try:
            return parse_policy(d)
        except ValueError as exc:
            raise _Bad(str(exc)) from None

    return _guard(key, raw, build)


# ---- a whole-tree snapshot ----------------------------------------------------


@dataclass(frozen=True)
class ClusterState:
    """A typed snapshot of everything under :data:`PREFIX`.

    Only *held* locks appear in ``leaders`` and the manager fields (a lock
    key with no ``Session`` is a released lock). A leader's epoch is the key's
    ``LockIndex`` when the listing has it (authoritative); the value's
    ``epoch`` is informational. ``modify_index`` maps every decoded key to
    its ``ModifyIndex``, for check-and-set writes.
    """

    configs: dict[str, QueueConfig] = field(default_factory=dict)
    assignments: dict[PartitionId, PartitionAssignment] = field(default_factory=dict)
    leaders: dict[PartitionId, LeaderRecord] = field(default_factory=dict)
    stream_leaders: dict[tuple[PartitionId, str], LeaderRecord] = field(default_factory=dict)
    """(partition, origin) -> holder of that stream's writer lock."""
    stream_positions: dict[tuple[PartitionId, str], dict[str, Position]] = field(default_factory=dict)
    positions: dict[PartitionId, dict[str, Position]] = field(default_factory=dict)
    external_manager: ManagerRecord | None = None
    cluster_managers: dict[str, ManagerRecord] = field(default_factory=dict)
    drains: dict[str, bool] = field(default_factory=dict)
    keys: dict[tuple[str, str], KeyRecord] = field(default_factory=dict)
    """(scope: a cluster or ``global``, name) -> registered CURVE public key."""
    policies: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    """queue -> authorization policy (zmqueue.security.authz)."""
    deleted: dict[str, int] = field(default_factory=dict)
    """queue -> incarnation its last DELETE_QUEUE deleted (:func:`deleted_key`)."""
    modify_index: dict[str, int] = field(default_factory=dict)
    create_index: dict[str, int] = field(default_factory=dict)
    """Every decoded key's ``CreateIndex``: a key deleted and written again
    (a queue deleted and created anew under its name) gets a new one."""


def _partition(text: str) -> int:
    n = digits(text)
    if n is None:
        raise _Bad(f"partition {text!r} is not a small non-negative integer")
    return n


Decode = Callable[..., Any]
"""``decode(decoder, key, raw, salt=None)``: ``decoder(key, raw)``, memoized by
``(key, raw, salt)`` (``salt``: what else the decoder's result depends on)."""
"""How :func:`_apply` calls a value's decoder: ``decode(decoder, key, raw)``."""


def _decode_now(decoder: Callable[[str, bytes | None], Any], key: str, raw: bytes | None,
                salt: Any = None) -> Any:
    return decoder(key, raw)


class DecodeMemo:
    """Decoded values of one listing of the tree, reused by the next listing
    for every key whose raw value did not change.

    A watch re-reads the whole tree on every change beneath it, and decoding
    every value (JSON, then validation into frozen records) was most of the
    cost: 8 of 14 ms of CPU per snapshot at 1,000 keys (200 R=3 queues),
    paid by every host's watch for every KV write. The decoders are pure
    functions of ``(key, raw)``, so a value decoded before is reused. Keeps
    only the last listing's values; one memo per thread (not thread safe).
    Decoded values are shared between snapshots and must not be mutated."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, bytes | None, Any], Any] = {}
        """The values the last listing decoded or reused."""
        self.decoded = 0
        """Values decoded (not reused) by the last listing."""

    def start(self) -> Decode:
        """The decode function for one new listing."""
        last: dict[tuple[str, bytes | None, Any], Any] = self._values
        now: dict[tuple[str, bytes | None, Any], Any] = {}
        self._values, self.decoded = now, 0

        def decode(decoder: Callable[[str, bytes | None], Any], key: str, raw: bytes | None,
                   salt: Any = None) -> Any:
            k = (key, raw, salt)
            value = last.get(k, _MISSING)
            if value is _MISSING:
                value = decoder(key, raw)
                self.decoded += 1
            now[k] = value
            return value
        return decode


_MISSING = object()


def _config_decoder(created: Any) -> Callable[[str, bytes | None], QueueConfig | Malformed]:
    """:func:`decode_queue_config`, with the key's ``CreateIndex`` as the
    config's ``incarnation`` (which queue of that name it is)."""
    def decode(key: str, raw: bytes | None) -> QueueConfig | Malformed:
        value = decode_queue_config(key, raw)
        if isinstance(value, QueueConfig) and type(created) is int and created > 0:
            return replace(value, incarnation=created)
        return value
    return decode


def _apply(
    state: ClusterState, external: list[ManagerRecord], item: dict[str, Any], parts: list[str],
    decode: Decode,
) -> Malformed | None:
    """Decode one item into ``state`` (the external manager into ``external``);
    returns the problem, if any."""
    key = str(item["Key"])
    raw = item.get("Value")
    held = bool(item.get("Session"))
    match parts:
        case ["queues", q, "config"]:
            created = item.get("CreateIndex")
            value: Any = decode(_config_decoder(created), key, raw, created)
            if isinstance(value, QueueConfig):
                state.configs[q] = value
        case ["queues", q, "partitions", p]:
            value = decode(decode_assignment, key, raw)
            if isinstance(value, PartitionAssignment):
                state.assignments[PartitionId(q, _partition(p))] = value
        case ["leaders", q, p]:
            value = decode(decode_leader, key, raw) if held else None
            if isinstance(value, LeaderRecord):
                lock_index = item.get("LockIndex")
                if isinstance(lock_index, int) and lock_index > 0:
                    value = LeaderRecord(value.node, value.endpoint, lock_index, value.extra)
                state.leaders[PartitionId(q, _partition(p))] = value
        case ["leaders", q, p, origin]:
            value = decode(decode_leader, key, raw) if held else None
            if isinstance(value, LeaderRecord):
                lock_index = item.get("LockIndex")
                if isinstance(lock_index, int) and lock_index > 0:
                    value = LeaderRecord(value.node, value.endpoint, lock_index, value.extra)
                state.stream_leaders[(PartitionId(q, _partition(p)), origin)] = value
        case ["positions", q, p, origin, node]:
            value = decode(decode_position, key, raw)
            if isinstance(value, Position):
                sp = state.stream_positions.setdefault((PartitionId(q, _partition(p)), origin), {})
                sp[node] = value
        case ["positions", q, p, node]:
            value = decode(decode_position, key, raw)
            if isinstance(value, Position):
                state.positions.setdefault(PartitionId(q, _partition(p)), {})[node] = value
        case ["managers", "external"]:
            value = decode(decode_manager, key, raw) if held else None
            if isinstance(value, ManagerRecord):
                external.append(value)
        case ["managers", "cluster", c]:
            value = decode(decode_manager, key, raw) if held else None
            if isinstance(value, ManagerRecord):
                state.cluster_managers[c] = value
        case ["hosts", node, "drain"]:
            value = decode(decode_drain, key, raw)
            if isinstance(value, bool):
                state.drains[node] = value
        case ["keys", scope, name]:
            value = decode(decode_key_record, key, raw)
            if isinstance(value, KeyRecord):
                state.keys[(scope, name)] = value
        case ["deleted", q] if q:
            value = decode(decode_tombstone, key, raw)
            if isinstance(value, int):
                state.deleted[q] = value
        case ["policies", q]:
            value = decode(decode_policy, key, raw)
            # a malformed policy fails closed: nobody but hosts until it is fixed
            state.policies[q] = value if isinstance(value, dict) else {MALFORMED: ()}
        case _:
            return Malformed(key, "unknown key under the zmqueue/ prefix")
    return value if isinstance(value, Malformed) else None


def parse_tree(items: list[dict[str, Any]] | None,
               memo: DecodeMemo | None = None) -> tuple[ClusterState, list[Malformed]]:
    """Turn a recursive KV listing (``kv.get(PREFIX, recurse=True)[1]``) into a
    :class:`ClusterState` and the list of problems found. Never raises: a bad
    item is reported and skipped; keys outside the prefix and folder keys
    (ending in ``/``) are ignored. ``memo``: reuse what the previous listing
    decoded (see :class:`DecodeMemo`)."""
    decode = memo.start() if memo is not None else _decode_now
    state = ClusterState()
    external: list[ManagerRecord] = []
    problems: list[Malformed] = []
    for item in items or []:
        key = item.get("Key") if isinstance(item, dict) else None
        if not isinstance(key, str):
            problems.append(Malformed(repr(item)[:80], "listing item has no 'Key'"))
            continue
        if not key.startswith(PREFIX) or key.endswith("/"):
            continue
        if not isinstance(item.get("Value"), bytes | None):
            problems.append(Malformed(key, "value is not bytes"))
            continue
        parts = key_parts(key)
        try:
            problem = _apply(state, external, item, parts, decode)
        except _Bad as exc:
            problem = Malformed(key, str(exc))
        if problem is not None:
            problems.append(problem)
            continue
        index = item.get("ModifyIndex")
        if isinstance(index, int):
            state.modify_index[key] = index
        created = item.get("CreateIndex")
        if isinstance(created, int):
            state.create_index[key] = created
    if external:
        state = replace(state, external_manager=external[-1])
    return state, problems
