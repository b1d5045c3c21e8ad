"""Git's lock files: whether one is held by a live process or was left by a dead one.

Git takes a lock by creating ``<file>.lock`` and keeps it open while it writes, then renames
it over ``<file>``. A process killed in between (a worker SIGKILLed mid-``git``) leaves the lock
behind, and every later git refuses the file until someone removes it. Waiting does not help;
so a lock is *stale* when no process has it open, and a stale lock is removed.

Who has a file open is read from ``/proc/<pid>/fd``, which shows only our own processes unless
the worker is root: a lock created by another user is never judged stale (it may be theirs and
live), and neither is one on a system without ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

__all__ = ["holders", "remove_if_stale"]

RECHECK_SECONDS = 0.2
"""A lock seen unheld is looked at once more after this long: git closes a ref's lock a moment
before renaming it, and a lock in that moment is not stale."""


def holders(lock: Path) -> set[int] | None:
    """Process ids that have ``lock`` open, or ``None`` when that cannot be known here."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    try:
        wanted = os.stat(lock)
    except OSError:
        return set()
    found: set[int] = set()
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    seen = os.stat(f"/proc/{pid}/fd/{fd}")
                    if (seen.st_dev, seen.st_ino) == (wanted.st_dev, wanted.st_ino):
                        found.add(int(pid))
                        break
    return found


def _unheld_same(lock: Path) -> os.stat_result | None:
    """The lock's status when it is ours to judge and nobody has it open, else ``None``."""
    try:
        status = os.stat(lock)
    except OSError:
        return None
    euid = os.geteuid()
    if euid != 0 and status.st_uid != euid:
        return None
    held = holders(lock)
    return status if held is not None and not held else None


def remove_if_stale(lock: Path) -> bool:
    """Remove ``lock`` when no process holds it (a dead process's); whether it is gone now."""
    first = _unheld_same(lock)
    if first is None:
        return not lock.exists()
    time.sleep(RECHECK_SECONDS)
    second = _unheld_same(lock)
    if second is None or (second.st_ino, second.st_mtime_ns) != (
        first.st_ino,
        first.st_mtime_ns,
    ):
        return not lock.exists()
    with contextlib.suppress(FileNotFoundError):
        lock.unlink()
    return True
