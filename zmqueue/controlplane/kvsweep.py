"""Keys of deleted queues left behind: the external manager's backstop.

``DELETE_QUEUE`` deletes a queue's writer locks and positions, and the
hosts' writes of them are fenced by its tombstone (:mod:`kvguard`), so
nothing of a deleted queue comes back. What slips through anyway (a host of
an earlier version during a rolling upgrade, a key written by hand) would
stay for good, so every :data:`SWEEP_EVERY_S` the external manager lists the
queue folders under ``zmqueue/leaders/`` and ``zmqueue-positions/`` and
removes those of queues that a ``DELETE_QUEUE`` deleted: no config, no
partition, no malformed key under ``zmqueue/queues/<q>/``, and a tombstone.
At most :data:`SWEEP_QUEUES_MAX` queues a pass, each in one transaction that
checks the manager lock is still held, that the queue's config key still
does not exist and that its tombstone is unchanged, so a queue created again
under the name meanwhile loses nothing. A queue whose config alone is
missing (deleted by hand: its hosts keep serving it) is never swept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zmqueue.controlplane import kvlayout as kv

SWEEP_EVERY_S = 10.0
"""How often the external manager looks for keys of deleted queues."""
SWEEP_QUEUES_MAX = 16
"""Most queues swept in one pass (one transaction each); the rest wait for the next."""
LEADERS_PREFIX = f"{kv.PREFIX}leaders/"
LEGACY_POSITIONS_PREFIX = f"{kv.PREFIX}positions/"


def listed_queues(keys: Iterable[str] | None, prefix: str) -> set[str]:
    """The queue names in a listing of ``prefix`` with ``keys=True,
    separator="/"`` (its folders ``<prefix><queue>/``; a key directly under
    ``prefix`` is no queue's)."""
    out = set()
    for k in keys or ():
        if isinstance(k, str) and k.startswith(prefix) and k.endswith("/"):
            name = k[len(prefix):-1]
            if name and "/" not in name:
                out.add(name)
    return out


def leftovers(state: kv.ClusterState, problems: Iterable[kv.Malformed], listed: Iterable[str]) -> list[str]:
    """The queues of ``listed`` (with keys under the leaders or positions
    trees) that a ``DELETE_QUEUE`` deleted, as ``state`` shows them: no
    config, no partition, no malformed key of theirs under
    ``zmqueue/queues/``, a tombstone. Sorted."""
    bad = {parts[1] for p in problems if len(parts := kv.key_parts(p.key)) >= 2 and parts[0] == "queues"}
    assigned = {pid.queue for pid in state.assignments}
    return sorted(q for q in set(listed) if q in state.deleted and q not in state.configs
                  and q not in assigned and q not in bad
                  and kv.deleted_key(q) in state.modify_index)


def sweep_ops(queue: str, tombstone_index: int, lock_key: str, sid: str) -> list[dict[str, Any]]:
    """One transaction: the manager lock still held by ``sid``, no config,
    the tombstone as read; then delete the queue's lock and position trees
    (the older ``zmqueue/positions/`` form too)."""
    return [{"KV": {"Verb": "check-session", "Key": lock_key, "Session": sid}},
            {"KV": {"Verb": "check-not-exists", "Key": kv.queue_config_key(queue)}},
            {"KV": {"Verb": "check-index", "Key": kv.deleted_key(queue), "Index": tombstone_index}},
            *({"KV": {"Verb": "delete-tree", "Key": f"{prefix}{queue}/"}}
              for prefix in (LEADERS_PREFIX, kv.POSITIONS_PREFIX, LEGACY_POSITIONS_PREFIX))]
