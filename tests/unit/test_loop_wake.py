"""Work another thread posts to the request loop makes the loop's wake pipe
readable at once (the loop polls it beside its sockets), and the loop
drains it before running what was posted."""

from __future__ import annotations

import select
import threading

from zmqueue.host.metadata import MetadataCache


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_posting_wakes_the_loop_and_draining_resets_the_wake() -> None:
    cache = MetadataCache(("127.0.0.1:1",), 1.0, lambda snap, forward: None, lambda: None)
    try:
        assert not readable(cache.wake_fd)
        ran: list[int] = []
        posters = [threading.Thread(target=cache.post, args=(lambda i=i: ran.append(i),))
                   for i in range(50)]
        for t in posters:
            t.start()
        for t in posters:
            t.join()
        assert readable(cache.wake_fd)
        cache.drain_wake()
        assert not readable(cache.wake_fd)
        cache.run_posted()
        assert sorted(ran) == list(range(50))
        for _ in range(100_000):  # far more posts than the pipe holds: none blocks or fails
            cache.post(lambda: None)
        assert readable(cache.wake_fd)
        cache.drain_wake()
        assert not readable(cache.wake_fd)
    finally:
        cache.stop()
