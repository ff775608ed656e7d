"""``signals_raise``: the first SIGINT/SIGTERM raises KeyboardInterrupt so the
``finally`` blocks stop what a benchmark started; a second one (Ctrl-C pressed
again) must not cut that stopping short (``zmqueue bench`` left its Consul
agent running, exit -2, when a second Ctrl-C came while it stopped its hosts).
Real signals in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, signal, time
    from zmqueue.bench.signals import signals_raise
    try:
        with signals_raise():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
                print("not interrupted", flush=True)
            finally:  # stopping what was started: more signals come meanwhile
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                print("stopped", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    print("restored" if signal.getsignal(signal.SIGINT) is signal.default_int_handler else "not restored",
          flush=True)
""")


def test_a_second_signal_while_a_benchmark_stops_does_not_cut_the_stopping_short() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stopped", "interrupted", "restored"], (done.stdout, done.stderr)
