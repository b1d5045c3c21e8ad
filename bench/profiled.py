"""Run a script under cProfile in every thread: ``bench.cpu --profile-worker``'s launcher.

    python -m bench.profiled OUT SCRIPT [ARGS...]

The SDK runs every workflow activation on a thread of its own pool and ``asyncio.to_thread``
work on another, so the profile covers each thread (``threading.Thread.run`` wrapped), not only
the event loop's. ``SIGUSR1`` forgets what was counted so far (the warm-up round), ``SIGUSR2``
writes the merged ``pstats`` file ``OUT``, and so does an ``os._exit`` (``worker.py`` leaves
with one). Each thread counts its own CPU time (``time.thread_time``), so a thread waiting on a
queue or a socket counts nothing. cProfile's own cost inflates code that makes many small
calls: read the ranking.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

_profiles: list[cProfile.Profile] = []


def _profiled_run(run: Any) -> Any:
    def wrapper(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        _profiles.append(profile)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    return wrapper


def _clear(*_: object) -> None:
    for profile in _profiles:
        profile.clear()


def _write(out: Path) -> None:
    stats: pstats.Stats | None = None
    for profile in list(_profiles):
        profile.create_stats()
        if not getattr(profile, "stats", None):
            continue
        if stats is None:
            stats = pstats.Stats(profile)
        else:
            stats.add(profile)
    if stats is not None:
        stats.dump_stats(out)


def main() -> None:
    # ``-m`` puts the working directory (the checkout: cpu.py starts it there) on the path,
    # where worker.py finds its packages.
    out, script, *args = sys.argv[1:]
    threading.Thread.run = _profiled_run(threading.Thread.run)  # type: ignore[method-assign]
    signal.signal(signal.SIGUSR1, _clear)
    signal.signal(signal.SIGUSR2, lambda *_: _write(Path(out)))
    real_exit = os._exit

    def exit_writing(code: int) -> None:
        _write(Path(out))
        real_exit(code)

    os._exit = exit_writing  # type: ignore[assignment]
    sys.argv = [script, *args]
    main_thread = cProfile.Profile(time.thread_time)
    _profiles.append(main_thread)
    main_thread.enable()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
