"""A command's processes belong to the activity attempt that started them and die with it.

Three mechanisms, because no one of them reaches every process:

* **Parent-death signal** (Linux ``PR_SET_PDEATHSIG``): the command's first process gets SIGKILL
  from the kernel when the worker dies (SIGKILL, OOM, crash), so ``command_timeout_seconds``
  never has to bound an orphan. It is per process: the command's own children do not get it.
  (Strictly it fires when the *thread* that started the command ends; commands are started from
  the worker's event loop, which lives as long as the worker.)
* **A mark in the environment**: every process of a command inherits ``TREADLE_COMMAND=<mark>``,
  a hash of the activity's workflow id, run id and activity id (the same for every attempt of
  one activity, and for a call the workflow made again as a new activity: its first one's).
  When a command ends, and before a retried attempt starts its own, every process of the
  worker's user that carries the mark is killed, also those that left the process group
  (``setsid``, daemons).
* **A record of the process group**: its id, its first process's start time and the boot id, in
  a file named by the mark. A retried attempt kills the processes still in that group, also those
  that removed the mark from their environment. The records live in a worker-owned directory
  outside the workspace (``<tmp>/treadle-<uid>-commands``, mode 0700): a model that could edit a
  record could make the worker kill any process of its user, and a workspace may be shared by
  hosts on which a process id means nothing. Like the ids in them, the records are host-local
  and usually cleared at boot; the boot id and start time reject a record whose group id was
  reused.

A process that leaves the group *and* clears its environment escapes all three when commands are
not OS-confined; under bubblewrap (``confinement``) every process is in the sandbox's pid
namespace, which the kernel empties when its first process ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import secrets
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio import activity

from treadle.activities.sent_marks import call_activity_id

__all__ = [
    "MARK_VARIABLE",
    "CommandMark",
    "die_with_worker",
    "forget_group",
    "kill_marked",
    "mark_this_attempt",
    "record_group",
]

MARK_VARIABLE = "TREADLE_COMMAND"
"""The environment variable that carries a command's mark to every process it starts."""
KILL_ROUNDS = 100
KILL_ROUND_PAUSE_SECONDS = 0.02
"""Killing repeats (up to KILL_ROUNDS times) until no marked process is left alive, because
one may fork while the others are being killed."""

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class CommandMark:
    """Which processes belong to one activity's commands, and where its group is recorded."""

    token: str
    record: Path | None
    """``None`` outside an activity: there is no later attempt to clean up for."""
    retried: bool
    """Whether an earlier attempt of the same activity may have left processes behind."""


def mark_this_attempt() -> CommandMark:
    """The mark for a command of the running activity (a fresh one outside an activity)."""
    if not activity.in_activity():
        return CommandMark(secrets.token_hex(16), None, retried=False)
    info = activity.info()
    first = call_activity_id()  # a call made again as a new activity keeps its first one's
    key = "\0".join((info.workflow_id or "", info.workflow_run_id or "", first))
    token = hashlib.sha256(key.encode()).hexdigest()[:32]
    directory = _records_dir()
    record = directory / f"{token}.json" if directory is not None else None
    return CommandMark(token, record, retried=info.attempt > 1 or first != info.activity_id)


def _records_dir() -> Path | None:
    """The worker's private record directory, or ``None`` if it is not safely ours."""
    directory = Path(tempfile.gettempdir()) / f"treadle-{os.getuid()}-commands"
    try:
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = os.lstat(directory)
    except OSError as exc:
        activity.logger.warning("tool.command_records_unavailable path=%s error=%s", directory, exc)
        return None
    # A shared /tmp: someone else may have made the name first, or made it a link.
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o077
    ):
        activity.logger.warning(
            "tool.command_records_unsafe path=%s: process groups are not recorded", directory
        )
        return None
    return directory


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up once, before any fork: the child only calls it."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def die_with_worker() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when the worker dies (Linux only)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the worker died before the signal was set
            os.kill(os.getpid(), signal.SIGKILL)

    return set_parent_death_signal


def record_group(mark: CommandMark, pgid: int) -> None:
    """Write down the command's process group so a retried attempt can kill what is left."""
    if mark.record is None:
        return
    started = _start_time(pgid)
    if started is None:  # already gone; the mark still finds its children
        return
    data = json.dumps({"pgid": pgid, "start": started, "boot": _boot_id()})
    temp = mark.record.with_name(f".{mark.record.name}.{secrets.token_hex(4)}")
    try:
        temp.write_text(data)
        os.replace(temp, mark.record)
    except OSError as exc:
        # The command still runs: its mark is the second way to find what it leaves behind.
        activity.logger.warning("tool.command_record_failed path=%s error=%s", mark.record, exc)
        with contextlib.suppress(OSError):
            temp.unlink()


def forget_group(mark: CommandMark, pgid: int) -> None:
    """Remove the record of ``pgid``, unless a later attempt has replaced it with its own."""
    if mark.record is None:
        return
    try:
        if json.loads(mark.record.read_text()).get("pgid") != pgid:
            return
        mark.record.unlink()
    except (FileNotFoundError, ValueError, AttributeError):
        return


def kill_marked(mark: CommandMark, *, leftovers: bool = False) -> int:
    """SIGKILL every live process that carries ``mark`` (and, with ``leftovers``, every one
    still in the recorded group of an earlier attempt); the number of processes killed.

    Blocking: it reads ``/proc``; async callers run it in a thread.
    """
    if not os.path.isdir("/proc/self"):
        return 0
    group = _recorded_group(mark) if leftovers else None
    needle = f"{MARK_VARIABLE}={mark.token}".encode()
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        targets = [
            pid
            for pid, pgrp, started in _live_processes()
            if pid != os.getpid()
            and (
                (group is not None and pgrp == group[0] and started >= group[1])
                or needle in _environment(pid)
            )
        ]
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(targets)
        time.sleep(KILL_ROUND_PAUSE_SECONDS)
    if killed:
        activity.logger.info(
            "tool.command_processes_killed count=%s leftovers=%s", len(killed), leftovers
        )
    return len(killed)


def _recorded_group(mark: CommandMark) -> tuple[int, int] | None:
    """(group id, start time of its first process) of an earlier attempt, if still valid."""
    if mark.record is None:
        return None
    try:
        data = json.loads(mark.record.read_text())
        pgid, started, boot = int(data["pgid"]), int(data["start"]), str(data["boot"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    if boot != _boot_id():
        return None
    leader = _start_time(pgid)
    if leader is not None and leader != started:
        return None  # the id now belongs to another process: never kill its group
    return pgid, started


def _live_processes() -> Iterator[tuple[int, int, int]]:
    """(pid, process group, start time in clock ticks) of every process that is not a zombie."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        # /proc/PID/stat field 5 is the process group, field 22 the start time.
        yield int(name), int(fields[2]), int(fields[19])


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def _environment(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return []


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
