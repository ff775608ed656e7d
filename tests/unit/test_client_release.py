"""A client the program forgot to close is released when it is collected,
also from a reference cycle (pyzmq's own Context.__del__ ran there after the
weak references to the sockets were cleared, and its term() hung the
collecting thread for good). Real ZeroMQ sockets; no host or Consul needed:
connections are made lazily and connect in the background."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc
    import zmqueue
    c = zmqueue.connect("127.0.0.1:1")
    c.connection("tcp://127.0.0.1:9")
    c.dedicated_connection("tcp://127.0.0.1:9")
    ctx = c.ctx
    c.cycle = c
    del c
    gc.collect()
    print("collected", flush=True)
    import time
    deadline = time.monotonic() + 20
    while not ctx.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    print("context closed" if ctx.closed else "context open")
""")


def test_a_client_in_a_reference_cycle_is_collected_without_hanging_and_releases_its_context() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["collected", "context closed"], (done.stdout, done.stderr)


def test_a_closed_client_is_not_released_twice() -> None:
    import zmqueue

    c = zmqueue.connect("127.0.0.1:1")
    c.connection("tcp://127.0.0.1:9")
    c.close()
    assert c.ctx.closed and not c._finalizer.alive


FORK_SCRIPT = textwrap.dedent("""
    import os, sys
    import zmqueue
    c = zmqueue.connect("127.0.0.1:1")
    c.connection("tcp://127.0.0.1:9")
    pid = os.fork()
    if pid == 0:  # the child: the parent's sockets are unusable here
        for call in (lambda: c.connection("tcp://127.0.0.1:9"), lambda: c.hosts(),
                     lambda: c.dedicated_connection("tcp://127.0.0.1:9")):
            try:
                call()
            except zmqueue.ClientClosed as exc:
                assert "before a fork" in str(exc), exc
            else:
                os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    c.connection("tcp://127.0.0.1:9")  # the parent's client is unaffected
    c.close()
    print("child exit", os.waitstatus_to_exitcode(status))
""")


def test_a_client_used_in_a_forked_child_says_so_instead_of_hanging() -> None:
    """(A request in the child waited forever: ZeroMQ sockets do not survive
    fork, and the request's timeout never fired.)"""
    done = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child exit 0", (done.stdout, done.stderr)


def test_the_connections_of_a_thread_that_ended_are_closed_and_forgotten() -> None:
    """(They piled up until close(): a client used from short-lived threads
    held threads x hosts sockets, up to the context's socket limit.)"""
    import threading

    import zmqueue

    c = zmqueue.connect("127.0.0.1:1")
    try:
        mine = c.connection("tcp://127.0.0.1:9")
        made: list[object] = []

        def use() -> None:
            made.append(c.connection("tcp://127.0.0.1:9"))
            made.append(c.connection("tcp://127.0.0.1:10"))

        threads = [threading.Thread(target=use) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(made) == 40 and all(conn.closed for conn in made)  # type: ignore[attr-defined]
        assert c._all_conns == [mine] and not mine.closed
        assert c.connection("tcp://127.0.0.1:9") is mine  # this thread's own is kept
    finally:
        c.close()
    assert c.ctx.closed and mine.closed
