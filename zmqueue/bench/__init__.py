"""Benchmarks: the ``zmqueue bench`` load generator, the raw pyzmq ceiling,
and the queue-operation benchmark. Results are written down in
docs/PERFORMANCE.md.

Modules: :mod:`~zmqueue.bench.config` (options), :mod:`~zmqueue.bench.backend`
(the contract a system under test implements, and zmqueue's),
:mod:`~zmqueue.bench.worker` (producer and consumer processes),
:mod:`~zmqueue.bench.runner` (one run: processes, progress, loss and duplicate
check), :mod:`~zmqueue.bench.report` (table and JSON lines),
:mod:`~zmqueue.bench.ceiling` (raw pyzmq), :mod:`~zmqueue.bench.queueops`.
"""
