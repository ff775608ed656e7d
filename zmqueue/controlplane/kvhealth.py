"""Bad values in Consul KV: keep the last good value, report the bad key.

An operator edits JSON in the Consul UI; a typo must not stop a queue. The
metadata cache therefore:

1. carries the last good value of every malformed key into the new snapshot
   (:func:`keep_last_good`): a bad queue-config edit leaves the queue running
   with its previous config, a bad assignment leaves the partition where it
   was, a bad drain flag changes nothing;
2. reports the bad keys in a Consul **warning** check ``kv:zmqueue-<node>``
   on the host's service (:class:`KvProblemReporter`). The check exists only
   while there are problems: it is registered on the first one and removed
   once every key is good again, so a clean host shows just its two health
   checks (:mod:`zmqueue.controlplane.advisory`). Discovery keeps ``kv:``
   checks out of a host's health.

Besides keys that do not decode, an edit is a problem when it would do harm
if applied: a queue config changing what is fixed at creation
(:func:`fixed_setting_edits`), a partition's ``replicas`` naming hosts
its cluster does not have or its ``cluster`` naming no known cluster
(:func:`unknown_replica_edits`), and a queue
config naming a dead-letter queue it cannot use (:func:`dead_letter_problems`:
an edit naming one is refused; a dead-letter queue deleted since is a
warning only).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Collection, Iterable
from dataclasses import replace

from zmqueue.config import FIXED_AT_CREATION, QUEUE_SETTINGS, QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.advisory import NOTES_CHARS_MAX, WarningCheck
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import KV_CHECK_PREFIX, HostInfo
from zmqueue.numbers import digits

log = logging.getLogger(__name__)


def kv_check_id(service_id: str) -> str:
    return f"{KV_CHECK_PREFIX}{service_id}"


def keep_last_good(prev: kv.ClusterState | None, state: kv.ClusterState,
                   problems: list[kv.Malformed]) -> kv.ClusterState:
    """``state`` with the previous value of every key in ``problems`` put back."""
    if prev is None or not problems:
        return state
    configs = dict(state.configs)
    assignments = dict(state.assignments)
    drains = dict(state.drains)
    created = dict(state.create_index)
    for p in problems:
        if not p.keep:
            continue
        match kv.key_parts(p.key):
            case ["queues", q, "config"] if q in prev.configs:
                configs[q] = prev.configs[q]
                if p.key in prev.create_index:  # the queue kept is the queue it was: the next good
                    created[p.key] = prev.create_index[p.key]  # edit is checked as an edit
            case ["queues", q, "partitions", n] if (num := digits(n)) is not None:
                pid = kv.PartitionId(q, num)
                if pid in prev.assignments:  # (replaces a value that decoded but was refused)
                    assignments[pid] = prev.assignments[pid]
            case ["hosts", node, "drain"] if node in prev.drains:
                drains.setdefault(node, prev.drains[node])
            case _:
                pass
    return replace(state, configs=configs, assignments=assignments, drains=drains,
                   create_index=created)


def fixed_setting_edits(prev: kv.ClusterState, state: kv.ClusterState) -> list[kv.Malformed]:
    """Queue configs edited in KV so as to change what is fixed once a queue
    exists (:data:`FIXED_AT_CREATION`) or to take partitions away: each is a
    problem, and :func:`keep_last_good` keeps the previous config. A queue
    deleted and created again under the same name (its key has a new
    ``CreateIndex``) is a new queue, not an edit."""
    out = []
    for q, new in state.configs.items():
        old = prev.configs.get(q)
        key = kv.queue_config_key(q)
        if old is None or old is new or state.create_index.get(key) != prev.create_index.get(key):
            continue
        changed = [f"{name} {getattr(old, name)!r} -> {getattr(new, name)!r}"
                   for name in FIXED_AT_CREATION if getattr(old, name) != getattr(new, name)]
        if new.partitions < old.partitions:
            changed.append(f"partitions {old.partitions} -> {new.partitions} (partitions can only be added)")
        if changed:
            out.append(kv.Malformed(key, f"{'; '.join(changed)}: fixed once the queue exists, the queue "
                                         "keeps its previous config; put the old value back, or create "
                                         "a new queue"))
            continue
        dropped = sorted(n for n in old.given - new.given if getattr(old, n) != getattr(new, n))
        if dropped:  # (a config written by any version names every setting it knows)
            was = ", ".join(f"{n} (was {getattr(old, n)!r})" for n in dropped)
            unknown = f"; unknown field(s) {', '.join(sorted(new.extra))}: a typo?" if new.extra else ""
            out.append(kv.Malformed(key, f"missing {was}, which would reset to the default{unknown}; the "
                                         "queue keeps its previous config: put the setting back"))
            continue
        near = misspelled_settings(set(new.extra) - set(old.extra))
        if near:
            named = "; ".join(f"unknown field {k!r:.60} (a typo of {s!r}?)" for k, s in near)
            out.append(kv.Malformed(key, f"{named}: it would change nothing, the queue keeps its previous "
                                         "config; set the setting by its name and remove the misspelled "
                                         "field"))
    return out


def misspelled_settings(unknown: Iterable[str]) -> list[tuple[str, str]]:
    """The unknown config fields in ``unknown`` that look like a setting's
    name misspelled (``visibilty_timeout_s``), each with that name. An edit
    adding one is refused as a problem: kept as an unknown field, it would
    change nothing while the operator believes it did. Unknown fields far
    from every setting's name stay accepted (a newer version's settings)."""
    names = sorted(QUEUE_SETTINGS)
    out = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.8)
        if close:
            out.append((key, close[0]))
    return out


def vanished_configs(prev: kv.ClusterState, state: kv.ClusterState,
                     problems: list[kv.Malformed]) -> list[kv.Malformed]:
    """Queue configs gone from KV while the queue's partition assignments
    remain: DELETE_QUEUE deletes them together, so the config key was deleted
    by hand. Each is a problem, and :func:`keep_last_good` keeps the previous
    config (the queue went on unserved, and with Consul's state lost the same
    way, every host removed the queue's data)."""
    bad = {p.key for p in problems}
    placed = {pid.queue for pid in state.assignments}
    return [kv.Malformed(key, "missing while the queue's partitions remain (deleted by hand?): the queue "
                              "keeps its previous config; put the config back (a new incarnation: "
                              "receipts handed out before then delete nothing, so messages in flight "
                              f"are delivered again), or delete the queue (zmqueue queue delete {q})")
            for q in prev.configs
            if q not in state.configs and q in placed and (key := kv.queue_config_key(q)) not in bad]


def _dead_letter_fault(cfg: QueueConfig, dlq: QueueConfig | None) -> str | None:
    """Why ``cfg`` cannot send its dead letters to ``dlq`` (the config of the
    queue it names; None: no such queue), as ``create_queue`` and
    ``set_attributes`` refuse it; None when it can."""
    name = cfg.dead_letter_queue
    kind = "FIFO" if cfg.fifo else "standard"
    if dlq is None:
        return f"dead_letter_queue {name!r} names no queue"
    if dlq.fifo != cfg.fifo:
        return (f"dead_letter_queue {name!r} is a {'FIFO' if dlq.fifo else 'standard'} queue; the "
                f"dead-letter queue of {kind} queue {cfg.name!r} must be a {kind} queue")
    if cfg.encrypted and not dlq.encrypted:
        return (f"dead_letter_queue {name!r} is not encrypted: the dead letters of encrypted queue "
                f"{cfg.name!r} would be stored there in plaintext")
    return None


def dead_letter_problems(prev: kv.ClusterState, state: kv.ClusterState) -> list[kv.Malformed]:
    """Queue configs whose ``dead_letter_queue`` names no queue, a queue of
    the other type, or an unencrypted one for an encrypted queue (which
    ``create_queue`` and ``set_attributes`` refuse; the data plane holds such
    a queue's dead letters, out of delivery, until it can move them). A KV
    edit that names such a dead-letter queue is refused (:func:`keep_last_good`
    keeps the previous config); once the queue it names exists and fits, the
    same value is no longer a problem and applies. A config naming a
    dead-letter queue that was fine and is gone (deleted since) or no longer
    fits, or a queue created in KV that way, is a warning only (``keep``
    False: nothing earlier to keep). Configs edited in the same snapshot in
    other ways are looked at in the next (the warning must not refuse
    them)."""
    out = []
    for q, new in sorted(state.configs.items()):
        if new.dead_letter_queue is None:
            continue
        fault = _dead_letter_fault(new, state.configs.get(new.dead_letter_queue))
        if fault is None:
            continue
        old = prev.configs.get(q)
        key = kv.queue_config_key(q)
        edit = old is not None and state.create_index.get(key) == prev.create_index.get(key)
        if edit and old is not None and old.dead_letter_queue != new.dead_letter_queue:
            was = repr(old.dead_letter_queue) if old.dead_letter_queue else "none"
            fix = (f"create it first (zmqueue queue create {new.dead_letter_queue}"
                   f"{' --fifo' if new.fifo else ''}): the edit applies once it exists, or name another"
                   if fault.endswith("names no queue") else "name another")
            out.append(kv.Malformed(key, f"{fault}; the queue keeps its previous config (dead-letter queue "
                                         f"{was}): {fix}"))
        elif old is None or old is new or old.same_settings(new):
            out.append(kv.Malformed(key, (
                f"{fault} (deleted since?); this config applies as it is, and the dead letters of {q} "
                f"wait in it, out of delivery (stats: dead_letters_waiting), until a fitting queue "
                f"{new.dead_letter_queue!r} exists or {q} names another (zmqueue queue set {q} "
                "--dead-letter-queue NAME; '' for none)"), keep=False))
    return out


def unknown_replica_edits(prev: kv.ClusterState, state: kv.ClusterState,
                          hosts: Iterable[HostInfo]) -> list[kv.Malformed]:
    """Partition assignments edited so as to add replicas that are not
    registered hosts of the assignment's cluster (a mistyped node id, a host
    not started yet, a wrong ``cluster``): each is a problem, and
    :func:`keep_last_good` keeps the previous assignment. Applied, such an
    edit made the ghosts voters: the manager's next change of the voters
    needed a majority of them to confirm and never completed, and the
    partition refused sends. A registered host counts whatever its health (a
    host that is down is still a replica); replicas the partition had before
    the edit are not checked (a host that deregistered stays a replica until
    the manager replaces it). Once every node named is registered (the host
    was started), the same value is no longer a problem and applies.

    So is an edit of ``cluster`` to a cluster no registered host names (any
    health: a cluster whose hosts are all down is still known) and no other
    partition is on: a typo. Applied, the partition was managed by no
    cluster manager (a drain did nothing; the external manager logged that
    the cluster "lost quorum" and moved an empty partition elsewhere)."""
    known: dict[str, set[str]] = {}
    for h in hosts:
        known.setdefault(h.cluster, set()).add(h.node)
    clusters = set(known) | {a.cluster for a in prev.assignments.values()}
    out = []
    for pid, new in sorted(state.assignments.items()):
        old = prev.assignments.get(pid)
        if old is None or old is new or old == new:
            continue
        if new.cluster != old.cluster and new.cluster not in clusters:
            listed = ", ".join(sorted(clusters)) or "none"
            out.append(kv.Malformed(kv.partition_key(pid), (
                f"cluster {new.cluster!r} is no known cluster (no registered host is in it and no partition "
                f"is on it; known clusters: {listed}); the partition keeps its previous assignment (cluster "
                f"{old.cluster!r}, replicas {list(old.replicas)}): fix the cluster name (a cluster being "
                "added: the edit applies once a host of it has registered)")))
            continue
        members = known.get(new.cluster, set())
        ghosts = [n for n in new.replicas if n not in old.replicas and n not in members]
        if ghosts:
            listed = ", ".join(sorted(members)) or "none"
            out.append(kv.Malformed(kv.partition_key(pid), (
                f"replicas {list(new.replicas)} name {ghosts}, not registered hosts of cluster "
                f"{new.cluster!r} (its hosts: {listed}); the partition keeps its previous replicas "
                f"{list(old.replicas)}: fix the node ids (a host being added: the edit applies once "
                "it has registered)")))
    return out


def describe(problems: list[kv.Malformed], unserved: Collection[str] = ()) -> str:
    """The ``kv:`` check's notes; ``unserved``: queues whose bad config this
    host knows no earlier good value of (it started since the edit)."""
    text = "; ".join(f"{p.key}: {p.reason}" for p in problems)
    kept = "last good value kept" if any(p.keep for p in problems) else "applied as they are"
    if unserved:
        kept += (f"; this host knows no good config of {', '.join(sorted(unserved))} (it started since the "
                 "edit) and does not serve it until the value is fixed")
    if any(p.key.startswith(f"{kv.PREFIX}policies/") for p in problems):
        kept += "; a bad policy denies everyone but hosts until it is fixed"
    return f"bad values in Consul KV ({kept}): {text}"[:NOTES_CHARS_MAX]


class KvProblemReporter:
    """Keeps the ``kv:`` warning check of one host in line with the problems
    seen. Call :meth:`report` from one thread only (it uses ``client``)."""

    def __init__(self, client: ConsulClient, service_id: str) -> None:
        self.check = WarningCheck(client, service_id, kv_check_id(service_id), "zmqueue KV values",
                                  "bad JSON in zmqueue/ KV keys")
        self.check_id = self.check.check_id

    def report(self, problems: list[kv.Malformed], unserved: Collection[str] = ()) -> None:
        notes = describe(problems, unserved) if problems else ""
        if self.check.report(notes) and notes:
            log.warning("%s", notes)
