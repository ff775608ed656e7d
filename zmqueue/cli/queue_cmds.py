"""``zmqueue queue create|set|list|delete|purge|stats|show|redrive``, ``zmqueue send`` and
``zmqueue receive``: the client library from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import zmqueue
from zmqueue.cli.common import Number, UsageError, add_consul_flag, console, consul_addresses
from zmqueue.config import MAX_VISIBILITY_S, MUTABLE_SETTINGS
from zmqueue.protocol import MAX_BATCH


def _client(args: argparse.Namespace) -> zmqueue.Client:
    return zmqueue.connect(list(consul_addresses(args.consul)),
                           curve_secret_file=getattr(args, "curve_secret", None))


def _client_flags(p: argparse.ArgumentParser) -> None:
    add_consul_flag(p)
    p.add_argument("--curve-secret", metavar="FILE", default=None,
                   help="this client's CURVE secret key file, for a secured cluster "
                        "(see docs/SECURITY.md; `zmqueue up --secure` prints it)")


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    q = sub.add_parser("queue", help="create, set, list, delete, purge, redrive queues and show their "
                       "stats and settings")
    qsub = q.add_subparsers(dest="queue_command", metavar="ACTION", parser_class=type(q))
    qsub.required = True

    p = qsub.add_parser("create", help="create a queue (same settings again: no-op)")
    p.add_argument("name")
    p.add_argument("--fifo", action="store_true", help="FIFO queue (strict order per group)")
    p.add_argument("--visibility-timeout", type=int, default=30, help="seconds (default 30)")
    p.add_argument("--retention", type=int, default=4 * 86400, help="seconds (default 4 days)")
    p.add_argument("--delay", type=int, default=0, help="default delivery delay, seconds")
    p.add_argument("--max-message-bytes", type=int, default=262144)
    p.add_argument("--dead-letter-queue", default=None, help="DLQ name (created if missing)")
    p.add_argument("--max-receive-count", type=int, default=5)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--replication-factor", type=int, default=1,
                   help="copies of every message, on that many hosts (1-5)")
    p.add_argument("--async-replication", action="store_true",
                   help="acknowledge sends before replicas have them (faster; see docs/REPLICATION.md)")
    p.add_argument("--sync-quorum", choices=["majority", "all"], default="majority",
                   help="which replicas a synchronous write waits for: a majority (survives the loss "
                        "of a minority, writes go on while one is down) or all (survives the loss of "
                        "R-1, writes stop while any replica is down); fixed at creation")
    p.add_argument("--max-messages", type=int, default=None, help="cap on stored messages")
    p.add_argument("--content-based-dedup", action="store_true", help="FIFO: dedup by body hash")
    p.add_argument("--fsync", choices=["always", "interval", "never"], default="interval")
    _client_flags(p)
    p.set_defaults(func=cmd_create)

    p = qsub.add_parser("set", help="change settings of a queue (as SQS SetQueueAttributes)")
    p.add_argument("name")
    p.add_argument("--visibility-timeout", type=int, help="seconds (0-43200)")
    p.add_argument("--retention", type=int, help="seconds")
    p.add_argument("--delay", type=int, help="default delivery delay, seconds (0-900)")
    p.add_argument("--max-message-bytes", type=int)
    p.add_argument("--dead-letter-queue", help="DLQ name (created if missing); '' detaches it")
    p.add_argument("--max-receive-count", type=int)
    p.add_argument("--max-messages", type=int, help="cap on stored messages; 0 removes the cap")
    p.add_argument("--content-based-dedup", choices=["on", "off"], help="FIFO: dedup by body hash")
    p.add_argument("--fsync", choices=["always", "interval", "never"])
    _client_flags(p)
    p.set_defaults(func=cmd_set)

    p = qsub.add_parser("list", help="list queue names")
    p.add_argument("--prefix", default="")
    _client_flags(p)
    p.set_defaults(func=cmd_list)

    p = qsub.add_parser("delete", help="delete a queue and its messages")
    p.add_argument("name")
    p.add_argument("--force", action="store_true",
                   help="delete it even if other queues name it as their dead-letter queue (their dead "
                        "letters then wait in them, out of delivery, until it exists again)")
    _client_flags(p)
    p.set_defaults(func=cmd_delete)

    for name, fn, text in (("purge", cmd_purge, "delete every message of a queue"),
                           ("stats", cmd_stats, "show a queue's counters"),
                           ("show", cmd_show, "show a queue's settings and, per partition, its "
                                              "cluster, replicas, writers and their endpoints")):
        p = qsub.add_parser(name, help=text)
        p.add_argument("name")
        _client_flags(p)
        p.set_defaults(func=fn)

    p = qsub.add_parser("redrive", help="move a dead-letter queue's messages back to their source "
                                        "queues (or --to one queue)")
    p.add_argument("name", help="the dead-letter queue (a queue some queue names as its dead_letter_queue, "
                                "unless --to and --force)")
    p.add_argument("--to", default=None, metavar="QUEUE",
                   help="send every message here (default: the queue each came from)")
    p.add_argument("--max", type=Number(int, ge=1), default=None, help="move at most this many (1 or more)")
    p.add_argument("--force", action="store_true",
                   help="with --to: move the messages even if no queue names NAME as its dead-letter queue "
                        "(a DLQ whose last source queue was deleted, or any queue)")
    _client_flags(p)
    p.set_defaults(func=cmd_redrive)

    p = sub.add_parser("send", help="send a message (BODY, or - to read stdin)")
    p.positionals_anywhere = True  # (send Q --attr k=v BODY)
    p.add_argument("queue")
    p.add_argument("body", nargs="?", default="-",
                   help="message body, before or after the options (one that starts with - after an "
                        "option: put -- before it); - (default) reads stdin")
    p.add_argument("--group-id", default=None, help="FIFO message group")
    p.add_argument("--dedup-id", default=None, help="FIFO deduplication id")
    p.add_argument("--delay", type=Number(int, ge=0, le=900), default=None,
                   help="seconds before it is visible, 0-900 (default: the queue's)")
    p.add_argument("--attr", action="append", default=[], metavar="K=V", help="attribute (repeatable)")
    p.add_argument("--lines", action="store_true",
                   help="each line of the body is its own message (empty lines skipped); standard "
                        "queues: pipelined, 64 in flight; FIFO (or --group-id): batches of up to "
                        "1000, in order. "
                        "Prints one id per line")
    _client_flags(p)
    p.set_defaults(func=cmd_send)

    p = sub.add_parser("receive", help="receive messages (prints one JSON line each)")
    p.add_argument("queue")
    p.add_argument("--max", type=Number(int, ge=1, le=MAX_BATCH), default=1,
                   help=f"messages to receive, 1-{MAX_BATCH} (default 1)")
    p.add_argument("--wait", type=Number(float, ge=0, le=20), default=0,
                   help="long-poll seconds, 0-20 (default 0)")
    p.add_argument("--visibility-timeout", type=Number(int, ge=0, le=MAX_VISIBILITY_S), default=None,
                   help=f"seconds, 0-{MAX_VISIBILITY_S} (default: the queue's)")
    p.add_argument("--delete", action="store_true",
                   help="delete the messages once printed (one whose line could not be written is not "
                        "deleted)")
    _client_flags(p)
    p.set_defaults(func=cmd_receive)


def cmd_create(args: argparse.Namespace) -> int:
    with _client(args) as c:
        q = c.create_queue(
            args.name, fifo=args.fifo, visibility_timeout=args.visibility_timeout,
            retention=args.retention, delay=args.delay, max_message_bytes=args.max_message_bytes,
            dead_letter_queue=args.dead_letter_queue, max_receive_count=args.max_receive_count,
            partitions=args.partitions, replication_factor=args.replication_factor,
            sync_replication=not args.async_replication, max_messages=args.max_messages,
            content_based_dedup=args.content_based_dedup, fsync=args.fsync,
            sync_quorum=args.sync_quorum)
        console.print(f"queue {q.name} ready ({'fifo' if q.config.fifo else 'standard'})")
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    # every settable name the parser has a flag for (the rate limits have none)
    given = {k: v for k in MUTABLE_SETTINGS if (v := getattr(args, k, None)) is not None}
    if not given:
        raise UsageError("nothing to change: give at least one setting")
    if "dead_letter_queue" in given:
        given["dead_letter_queue"] = given["dead_letter_queue"] or None
    if "max_messages" in given:
        given["max_messages"] = given["max_messages"] or None
    if "content_based_dedup" in given:
        given["content_based_dedup"] = given["content_based_dedup"] == "on"
    with _client(args) as c:
        cfg = c.get_queue(args.name).set_attributes(**given)
        console.print(f"queue {cfg.name}: " + ", ".join(f"{k}={getattr(cfg, MUTABLE_SETTINGS[k])!r}"
                                                        for k in given))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        for name in c.list_queues(args.prefix):
            print(name)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _client(args) as c:
        sources = [] if args.force else c.list_dead_letter_source_queues(args.name)
        if sources:
            named = ", ".join(sources)
            raise zmqueue.InvalidParameter(
                f"queue {args.name} is the dead-letter queue of {named}: deleted, their dead letters would "
                f"wait in them, out of delivery (stats: dead_letters_waiting), until a queue {args.name} "
                f"exists again; first have them name another (zmqueue queue set SOURCE --dead-letter-queue "
                f"NAME; '' for none), or pass --force", field="name", sources=sources)
        c.delete_queue(args.name)
        console.print(f"queue {args.name} deleted")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with _client(args) as c:
        n = c.get_queue(args.name).purge()
        console.print(f"purged {n} messages from {args.name}")
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:
    with _client(args) as c:
        report = c.get_queue(args.name).redrive(to=args.to, max_messages=args.max, force=args.force)
    where = ", ".join(f"{n} to {q}" for q, n in sorted(report.moved.items())) or "none"
    console.print(f"moved {report.total} messages from {args.name} ({where})")
    if report.skipped:
        why = (f"whose source queue no longer exists ({', '.join(report.missing)}) or without one"
               if report.missing else "without a source queue")
        console.print(f"left {report.skipped} messages {why} in {args.name}; pass --to QUEUE to move them")
    if report.failed_deletes:
        console.print(f"{report.failed_deletes} moved messages could not be deleted from "
                      f"{args.name} and will be delivered from it again")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _client(args) as c:
        print(json.dumps(c.get_queue(args.name).stats(), sort_keys=True))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """As SQS's GetQueueAttributes, plus where the queue lives (JSON)."""
    with _client(args) as c:
        print(json.dumps(c.queue_info(args.name), sort_keys=True, indent=2))
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read() if args.body == "-" else args.body.encode()
    attrs = {}
    for kv in args.attr:
        k, sep, v = kv.partition("=")
        if not sep:
            raise zmqueue.InvalidParameter(f"--attr {kv!r} must be K=V")
        attrs[k] = v
    with _client(args) as c:
        q = c.get_queue(args.queue)
        if args.lines:
            for mid in _send_lines(q, [ln for ln in body.splitlines() if ln], attrs or None, args):
                print(mid)
            return 0
        mid = q.send(body, attributes=attrs or None, delay=args.delay,
                     group_id=args.group_id, dedup_id=args.dedup_id)
        print(mid)
    return 0


def _send_lines(q: zmqueue.Queue, lines: list[bytes], attrs: dict[str, Any] | None,
                args: argparse.Namespace) -> list[str]:
    """Ids of ``lines`` sent one message each: through a pipeline (standard
    queues), or in batches that keep their order (FIFO, or with a group id)."""
    if args.dedup_id is not None:
        raise zmqueue.InvalidParameter("--dedup-id names one message; with --lines omit it (a FIFO "
                                       "queue created with content-based dedup then deduplicates each "
                                       "line by its content; otherwise lines are not deduplicated)",
                                       field="dedup_id")
    if q.config.fifo or args.group_id is not None:
        msgs = [zmqueue.OutgoingMessage(ln, attrs, args.delay, args.group_id) for ln in lines]
        return [mid for i in range(0, len(msgs), 1000) for mid in q.send_batch(msgs[i:i + 1000])]
    with q.pipeline(window=64) as pipe:
        pending = [pipe.send(ln, attrs, args.delay) for ln in lines]
    return [p.id or "" for p in pending]


def cmd_receive(args: argparse.Namespace) -> int:
    with _client(args) as c:
        q = c.get_queue(args.queue)
        msgs = q.receive(args.max, args.wait, args.visibility_timeout)
        printed: list[zmqueue.Message] = []
        try:
            for m in msgs:
                sys.stdout.write(json.dumps({
                    "id": m.id, "body": m.body.decode("utf-8", "replace"), "attributes": {
                        k: v if not isinstance(v, bytes) else v.hex() for k, v in m.attributes.items()},
                    "receive_count": m.receive_count, "sent_at": m.sent_at.isoformat(),
                    "group_id": m.group_id, "receipt": m.receipt}) + "\n")
                sys.stdout.flush()  # written (a closed stdout raises here), so it may be deleted
                printed.append(m)
        finally:  # (stdout closed by its reader: the ones written are deleted, the others kept)
            if args.delete and printed:
                q.delete_batch([m.receipt for m in printed])
    return 0
