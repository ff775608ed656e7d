"""``zmqueue keys ...``: CURVE key pairs and their registration in Consul KV,
and per-queue at-rest keys (docs/SECURITY.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from zmqueue.cli.common import StdoutConsole, add_consul_flag, console, consul_addresses
from zmqueue.controlplane import keyring
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.errors import ConfigError
from zmqueue.security import atrest, curve


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    keys = sub.add_parser("keys", help="CURVE keys (generate, register, list, revoke) and at-rest keys")
    ks = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    p = ks.add_parser("generate", help="write NAME.key (public) and NAME.key_secret (keep private)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the key files")
    p.add_argument("--name", default="zmqueue", help="file name stem (default zmqueue)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing pair (whoever is registered with its public key is locked out)")
    p.set_defaults(func=cmd_generate)

    p = ks.add_parser("register", help="allow a public key in (Consul KV zmqueue/keys/...)")
    p.add_argument("--public", required=True, metavar="FILE", help="the .key (or .key_secret) file")
    p.add_argument("--name", required=True, help="identity of the key holder (client id or host node)")
    p.add_argument("--role", required=True, choices=("client", "host"))
    p.add_argument("--cluster", default=keyring.GLOBAL,
                   help="cluster whose hosts accept the key (default: global = every cluster)")
    add_consul_flag(p)
    p.set_defaults(func=cmd_register)

    p = ks.add_parser("list", help="registered keys")
    add_consul_flag(p)
    p.set_defaults(func=cmd_list)

    p = ks.add_parser("revoke", help="remove a registered key (refused from its next connection)")
    p.add_argument("--name", required=True)
    p.add_argument("--cluster", default=keyring.GLOBAL)
    add_consul_flag(p)
    p.set_defaults(func=cmd_revoke)

    p = ks.add_parser("data-key", help="add (rotate to) a new at-rest key for a queue in a key dir")
    p.add_argument("--queue", required=True)
    p.add_argument("--key-dir", required=True, metavar="DIR")
    p.set_defaults(func=cmd_data_key)


def _client(args: argparse.Namespace) -> ConsulClient:
    return ConsulClient(consul_addresses(args.consul), timeout_s=3.0)


def cmd_generate(args: argparse.Namespace) -> int:
    pub, sec = curve.generate(args.out, args.name, force=args.force)
    console.print(f"public key: {escape(str(pub))}\nsecret key: {escape(str(sec))} "
                  "(mode 0600; never copy it into Consul)", soft_wrap=True)
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    public = curve.load_public(args.public).decode()
    keyring.register_key(_client(args), args.cluster, args.name, public, args.role)
    # (keys, names and paths are printed escaped: a z85 key may hold "[...]", which rich
    # took for markup and cut out of the key; and unwrapped: a key split over two lines
    # is not the key an operator copies)
    console.print(escape(f"registered {args.role} key {args.name!r} for {args.cluster}: {public}"),
                  soft_wrap=True)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    table = Table(title="registered CURVE keys")
    for col in ("scope", "name", "role", "public key"):
        table.add_column(col, no_wrap=True)
    for (scope, name), rec in sorted(keyring.list_keys(_client(args)).items()):
        table.add_row(escape(scope), escape(name), escape(rec.role), escape(rec.public))
    # (never a cell cut or split: a key or name across two lines is not the one an operator
    # copies; a table wider than the terminal is wrapped by the terminal instead)
    wide = console.measure(table, options=console.options.update_width(10_000)).maximum
    StdoutConsole(highlight=False, width=max(console.width, wide)).print(table)
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    if not keyring.revoke_key(_client(args), args.cluster, args.name):
        raise ConfigError(f"no key {args.name!r} is registered for {args.cluster}; `zmqueue keys list` "
                          "shows the registered ones (and their scopes: pass --cluster C)", field="name")
    console.print(escape(f"revoked {args.name!r} ({args.cluster})"))
    return 0


def cmd_data_key(args: argparse.Namespace) -> int:
    ident = atrest.add_key(args.key_dir, args.queue)
    path = atrest.key_path(Path(args.key_dir), args.queue)
    console.print(escape(f"{path}: key {ident} is now current for {args.queue!r}; copy the file to every "
                         "host's --key-dir and restart them one at a time"))
    return 0
