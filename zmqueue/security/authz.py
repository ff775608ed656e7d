"""Per-queue authorization policies.

A policy (Consul KV ``zmqueue/policies/<queue>``, JSON) lists, per action,
the client identities allowed: ``{"send": ["alice", "*"], "receive": [...],
"delete": [...], "admin": [...]}``. ``"*"`` allows every authenticated
identity. An action missing from a policy allows nobody; a queue with no
policy allows everyone (the local demo's default). Hosts (keys registered
with role ``host``) are always allowed: they forward dead letters.

Without CURVE there is no authenticated identity: requests count as
:data:`ANONYMOUS`, which only ``"*"`` or an explicit ``"anonymous"`` admits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zmqueue.errors import AccessDenied
from zmqueue.protocol import Command

ACTIONS = ("send", "receive", "delete", "admin")
ANONYMOUS = "anonymous"

Policy = Mapping[str, tuple[str, ...]]

ACTION_OF: dict[Command, str] = {
    Command.SEND: "send",
    Command.RECEIVE: "receive",
    Command.SUBSCRIBE: "receive",
    Command.DELETE: "delete",
    Command.CHANGE_VISIBILITY: "delete",
    Command.PURGE_QUEUE: "admin",
    Command.CREATE_QUEUE: "admin",
    Command.DELETE_QUEUE: "admin",
    Command.SET_QUEUE_ATTRIBUTES: "admin",
}
"""Commands checked against a queue's policy. Reads of metadata and stats
(GET_QUEUE, LIST_QUEUES, QUEUE_STATS), credit and cancel are not checked (a credit
that carries deletes is checked as a delete, by the front door)."""


def parse_policy(value: Any) -> dict[str, tuple[str, ...]]:
    """Validate a decoded JSON policy; ValueError naming the problem."""
    if not isinstance(value, dict):
        raise ValueError("a policy must be a JSON object of action -> [identities]")
    out: dict[str, tuple[str, ...]] = {}
    for action, ids in value.items():
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r} (use {', '.join(ACTIONS)})")
        if not isinstance(ids, list) or not all(isinstance(i, str) and 0 < len(i) <= 128 for i in ids):
            raise ValueError(f"{action!r} must be a list of identity names")
        out[action] = tuple(ids)
    return out


MALFORMED = "~malformed"
"""The key of the policy that stands in for a malformed one (fails closed):
it admits nobody, and :func:`check` says why."""


def allowed(policy: Policy | None, action: str, identity: str) -> bool:
    if policy is None:
        return True
    ids = policy.get(action, ())
    return "*" in ids or identity in ids


def check(policy: Policy | None, action: str, queue: str, identity: str) -> None:
    if not allowed(policy, action, identity):
        why = (" is malformed, so it admits nobody until it is fixed (the hosts' kv: check names the "
               "problem)" if policy is not None and MALFORMED in policy else "")
        raise AccessDenied(f"{identity} may not {action} on queue {queue!r} (the policy at "
                           f"zmqueue/policies/{queue}{why})", action=action, queue=queue, identity=identity)
