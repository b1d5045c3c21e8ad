"""The benchmarks' CPU reading (``bench.suite.cpu_seconds``): another process's CPU to the
nanosecond, every thread counted, those that have ended too, and agreeing with ``/proc``."""

from __future__ import annotations

import subprocess
import sys

from bench.suite import cpu_seconds, cpu_times

CHILD = """
import sys, threading, time

used = []

def burn():
    total = 0
    for i in range(3_000_000):
        total += i
    used.append(time.thread_time())  # this thread's own CPU, just before it ends

worker = threading.Thread(target=burn)
worker.start()
worker.join()  # ended before the parent reads
print(used[0], flush=True)
sys.stdin.readline()  # held until the parent has read
"""


def test_cpu_seconds_counts_an_ended_thread_and_agrees_with_proc() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        thread_cpu = float(child.stdout.readline())
        precise, ticks = cpu_seconds(child.pid), sum(cpu_times(child.pid))
        assert precise >= thread_cpu > 0  # the ended thread is in it
        assert round(precise * 1e9) % 10_000_000 != 0  # finer than /proc's ticks
        assert abs(precise - ticks) <= 0.03  # /proc's 10 ms ticks, user and system rounded
        assert cpu_seconds(child.pid) >= precise  # a clock: it never goes back
        child.stdin.close()
