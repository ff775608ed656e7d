"""CURVE public keys and authorization policies in Consul KV.

- ``zmqueue/keys/<cluster|global>/<name>``: ``{"public": z85, "role":
  "client"|"host", "name": name}``. A host accepts the keys of its own
  cluster and the ``global`` ones. Secret keys are never stored in Consul.
- ``zmqueue/policies/<queue>``: ``{"send": [...], "receive": [...],
  "delete": [...], "admin": [...]}`` (zmqueue.security.authz).
"""

from __future__ import annotations

import json
from typing import Any

from zmqueue.config import validate_ident
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.errors import ConfigError

GLOBAL = "global"


def register_key(client: ConsulClient, scope: str, name: str, public: str, role: str) -> None:
    validate_ident(scope, "cluster")
    validate_ident(name, "name")
    rec = kv.KeyRecord(public, role, name)
    raw = kv.encode_key_record(rec)
    bad = kv.decode_key_record("new key", raw)
    if isinstance(bad, kv.Malformed):
        raise ConfigError(bad.reason, field="key")
    for (other_scope, other_name), other in list_keys(client).items():
        if other_name == name and other.role != role:
            raise ConfigError(f"the name {name!r} is registered for a {other.role} key (scope "
                              f"{other_scope}): a {role} key under it would share its identity; pick "
                              "another name, or revoke that key first", field="name")
    client.call(lambda c: c.kv.put(kv.key_record_key(scope, name), raw))


def revoke_key(client: ConsulClient, scope: str, name: str) -> bool:
    key = kv.key_record_key(scope, name)
    _, item = client.call(lambda c: c.kv.get(key))
    if item is None:
        return False
    client.call(lambda c: c.kv.delete(key))
    return True


def list_keys(client: ConsulClient) -> dict[tuple[str, str], kv.KeyRecord]:
    _, items = client.call(lambda c: c.kv.get(f"{kv.PREFIX}keys/", recurse=True))
    state, _ = kv.parse_tree(items)
    return state.keys


def allowed_keys(keys: dict[tuple[str, str], kv.KeyRecord], cluster: str) -> dict[str, kv.KeyRecord]:
    """z85 public key -> record, for the hosts of ``cluster``."""
    return {rec.public: rec for (scope, _), rec in sorted(keys.items())
            if scope in (GLOBAL, cluster)}


def put_policy(client: ConsulClient, queue: str, policy: dict[str, Any]) -> None:
    raw = json.dumps(policy, sort_keys=True).encode()
    bad = kv.decode_policy("new policy", raw)
    if isinstance(bad, kv.Malformed):
        raise ConfigError(bad.reason, field="policy")
    client.call(lambda c: c.kv.put(kv.policy_key(queue), raw))


def delete_policy(client: ConsulClient, queue: str) -> None:
    client.call(lambda c: c.kv.delete(kv.policy_key(queue)))
