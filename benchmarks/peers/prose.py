# ruff: noqa: E501, RUF001
"""The text around the generated tables of docs/PERFORMANCE.md and
docs/perf/peers.md (``str.format`` templates; literal braces are doubled)."""

from __future__ import annotations

PROMISES = """\
| system | what a confirmed send means here | how the consumer acknowledges |
|---|---|---|
| zmqueue | the host wrote it to its segment log (page cache); `fsync=interval` fdatasyncs within 50 ms; R=3 sync also waits for replicas (see W5 note) | `delete_batch`, a confirmed request |
| RabbitMQ 3.10.8 quorum queue | publisher confirm, sent after the Raft log is fsynced | `basic.ack multiple`, not confirmed by the server; prefetch max(10, 2×batch) |
| NATS 2.9.10 JetStream, file storage | publish ack; **NATS 2.9 does not fsync before the ack** | `ack` on each message, then one `flush` round trip |
| Redis 7.0.15 Streams | XADD reply; AOF `appendfsync everysec`: **a weaker promise**, up to ~1 s of confirmed writes can be lost on a crash | `XACK` + `XDEL` in one pipeline |
"""

METHOD = """\
- **Workloads.** W1: 1 producer and 1 consumer process, one send at a time,
  each confirmed, every message received and deleted/acked; end-to-end msg/s
  = distinct messages received / time from start to the last receipt. W2 is
  read from the same runs: send round-trip p50/p99/p99.9. W3: W1 with batches
  of 100 (`send_batch` / a pipelined batch of publishes / one XADD pipeline).
  W4: 4 producers, 4 consumers, one send at a time. W5: W1 with 3 replicas and
  synchronous replication (zmqueue R=3 sync on a 3-host cluster vs a 3-node
  NATS cluster with an R=3 stream); W5b: W3 the same way. W5-half: zmqueue
  R=3 sync paced at half of its own median W5 send rate, for the send p99
  target.
- **Like with like.** Every client sends synchronously from one thread per
  process: one request (one message, or one batch) in flight, waiting for
  its confirmation. Consumers take up to max(batch, 10) messages per receive
  in every system. zmqueue's client has no pipelining today, so the peers
  are not given any either (beyond the batch).
- **Checks.** Every body carries (producer, sequence, send time); each run
  checks every confirmed id: *lost* = confirmed and never received, *dup* =
  received more than once.
- **Noise.** The machine has 2 cores shared by the servers, the load
  generator processes and, while these runs were taken, other people's test
  suites. Runs are interleaved (run 1 of every system, then run 2, ...) and
  the tables hold medians of {runs} runs, so the ratios compare runs side by
  side.
"""

PERFORMANCE_MD = """\
# Performance

The latest measurements, their machine, the command that reproduces them and
the ratios to their references. Generated on {date} by `{command}`
(medians of {runs} runs; every ratio compares runs taken side by side in that
one invocation).

**Machine:** {machine}.

## Summary

{summary}

W5 rows are **provisional**: replication (R=3) is being built while this was
measured; `create_queue(replication_factor=3, sync_replication=True)` is
accepted, but the measured path may not yet wait for real replicas. Re-run
the command above once replication lands.

![throughput and latency per system](img/perf/peers.png)

## Reproduce

```sh
pip install -e '.[bench]'               # pika, nats-py, redis[hiredis], matplotlib
python -m benchmarks.peers --runs 3 --write   # installs and starts the peers (apt-get), ~20 min
zmqueue bench --workload W3 --runs 3          # zmqueue alone, on a cluster it starts
python -m benchmarks.queues --runs 3 --write  # queue operations beside raw pyzmq
python -m benchmarks.ceiling --runs 3         # raw pyzmq only
```

## What a confirmation means in each system

{promises}

## Method

{method}

## zmqueue against the peers

Full tables, per-run JSON lines and notes: [docs/perf/peers.md](perf/peers.md).

{full}

## Raw pyzmq ceiling (same invocation)

The machine's ceiling for any ZeroMQ design: the server side in another
process, payloads msgpack-packed 100 to a frame, loopback TCP.

{ceiling}

## Queue operations beside raw pyzmq

One client thread, one host, 100-byte messages, batches of 100
([docs/perf/queues.md](perf/queues.md), `python -m benchmarks.queues --runs 3 --write`):

{queues}

## Storage engine

Copied from [docs/perf/storage.md](perf/storage.md) (written by the storage
engine's owner; see there for method and notes):

{storage}

## Analytics

{analytics}

## Where the time goes

{analysis}
"""

PEERS_MD = """\
# zmqueue against RabbitMQ, NATS JetStream and Redis Streams

Generated on {date} by `{command}`; medians of {runs} runs.
Machine: {machine}.

{promises}

## Method

{method}

## Summary

{summary}

{full}

## Raw pyzmq ceiling

{ceiling}

## Every run (JSON lines)

```
{jsonl}
```
"""

ANALYSIS = """\
(filled in after the profile)
"""
