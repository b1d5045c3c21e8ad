"""Knowing what a command changed without walking the workspace: one inotify instance per
workspace (``Watcher``), a watch on every directory a snapshot walked (ignored ones need none),
drained after the step with a non-blocking read.

inotify queues an event in the system call that changed the file, so once a command's process
has exited every change it made is already in the queue: draining it then, without waiting,
gives every path touched since the drain before (no sentinel, no delay). A new directory gets
its watch when the snapshot walks it (``scan.walk`` calls ``add`` before reading each
directory), so what was created in it before the watch is seen by that walk.

What a watcher cannot see makes it untrusted (``broken``), and the snapshot walks the whole
workspace instead: the kernel's queue overflowed (``IN_Q_OVERFLOW``), a watch could not be
added (``fs.inotify.max_user_watches`` reached, a directory that cannot be watched), the
workspace itself was moved, deleted or unmounted. Nor does inotify report a write through
another name of a hard-linked file, a write into a shared memory mapping after its file was
closed, or a change made on another machine to a network file system: the periodic whole
walk (``SnapshotConfig.full_walk_every``) remains the net for those.

Linux only (ctypes on libc, no dependency); elsewhere the snapshotter says once why there is
none (``say_once``) and walks as before. Blocking system calls: called in the snapshotter's thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import queue
import struct
import sys
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Changes", "WatchUnavailable", "Watcher", "say_once"]

log = logging.getLogger(__name__)

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

MASK = (
    IN_CREATE
    | IN_DELETE
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_ATTRIB
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
"""What a directory's watch reports: every way a file in it can change (``IN_Q_OVERFLOW``
is always reported). Only directories, never through a symbolic link, and nothing about a
file once it is unlinked."""

CHANGED = (
    IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO
)
DIRECTORY_CHANGED = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
"""A directory's own times and mode are not in a snapshot: only its coming and going counts."""

EVENT = struct.Struct("iIII")
"""``struct inotify_event``: wd, mask, cookie, len; then ``len`` bytes of NUL-padded name."""
READ_BYTES = 64 * 1024


class WatchUnavailable(Exception):
    """No watcher on this machine (not Linux, no inotify, the instance limit reached)."""


@dataclass
class Changes:
    """What a drain found: the paths to look at again, and the events it read."""

    paths: set[str] = field(default_factory=set)
    events: int = 0


class _Libc:
    """The three inotify calls, from libc through ctypes."""

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise WatchUnavailable(f"inotify is Linux's; this is {sys.platform}")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        try:
            self.init1 = libc.inotify_init1
            self.add_watch = libc.inotify_add_watch
            self.rm_watch = libc.inotify_rm_watch
        except AttributeError as exc:
            raise WatchUnavailable("this libc has no inotify") from exc
        self.init1.argtypes = [ctypes.c_int]
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]


_libc: _Libc | WatchUnavailable | None = None


def _calls() -> _Libc:
    global _libc
    if _libc is None:
        try:
            _libc = _Libc()
        except (OSError, WatchUnavailable) as exc:
            _libc = exc if isinstance(exc, WatchUnavailable) else WatchUnavailable(str(exc))
    if isinstance(_libc, WatchUnavailable):
        raise _libc
    return _libc


def _close_fd(fd: int) -> None:
    """Close one inotify descriptor (on the closer's thread)."""
    os.close(fd)


class _Closer:
    """Closes inotify descriptors on a thread of its own. Closing one makes the kernel drop
    every watch and wait out a grace period (seconds on a loaded machine), and a watcher's
    finalizer runs in whichever thread the garbage collector happens to run: in a worker, a
    workflow's, where two seconds trip the SDK's deadlock detector (seen: a replay failed so).
    ``close`` and the finalizer only hand the descriptor over; a queue's ``put`` never blocks
    and may be called from a finalizer."""

    def __init__(self) -> None:
        self._fds: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (when a watcher is made: never from a finalizer)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="treadle-inotify-closer", daemon=True
                )
                self._thread.start()

    def __call__(self, fd: int) -> None:
        self._fds.put(fd)

    def _run(self) -> None:
        while True:
            fd = self._fds.get()
            try:
                _close_fd(fd)
            except OSError:
                log.debug("workspace.watch.close_failed fd=%d", fd, exc_info=True)


_closer = _Closer()


class Watcher:
    """One workspace's inotify instance: a watch per directory it was shown (``add``), and
    the paths changed since the last ``drain``. Once ``broken`` (with the reason), it is not
    to be trusted again: the snapshotter walks and starts another."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._calls = _calls()
        fd = self._calls.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise WatchUnavailable(f"inotify_init1: {os.strerror(code)}{_limit(code)}")
        self.fd: int | None = fd
        _closer.start()
        self._closer = weakref.finalize(self, _closer, fd)
        self._lock = threading.Lock()
        """The descriptor is used in the snapshotter's thread and may be closed from the
        worker's (a workspace forgotten): never both at once."""
        self.paths: dict[int, str] = {}
        """Watch descriptor -> the directory it watches, relative to the root (``""``)."""
        self.watches: dict[str, int] = {}
        self.broken: str | None = None
        """Why the watcher stopped seeing everything (``None``: it has not)."""

    def add(self, rel: str) -> None:
        """Watch the directory ``rel`` (called before it is read, so what changes after that
        read is reported); a failure breaks the watcher."""
        with self._lock:
            if self.fd is not None and self.broken is None:
                self._add(rel)

    def _add(self, rel: str) -> None:
        try:
            wd = self._add_watch(os.fsencode(self.root / rel) if rel else os.fsencode(self.root))
        except OSError as exc:
            code = exc.errno or 0
            self.broken = f"cannot watch {rel or '.'}: {os.strerror(code)}{_limit(code)}"
            return
        old = self.paths.get(wd)
        if old is not None and old != rel:
            # One directory at two paths (a bind mount), or moved while it was walked: its
            # events would name one path alone.
            self.broken = f"{old or '.'} is also {rel}"
            return
        self.paths[wd] = rel
        self.watches[rel] = wd

    def _add_watch(self, path: bytes) -> int:
        """One ``inotify_add_watch`` (a test makes it fail)."""
        assert self.fd is not None
        wd = int(self._calls.add_watch(self.fd, path, MASK))
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return wd

    def drain(self) -> Changes:
        """Every event queued since the last drain, without waiting: the paths they name (a
        new directory's path: its whole content is looked at, and watched)."""
        changes = Changes()
        with self._lock:
            if self.fd is not None:
                self._drain(changes)
        return changes

    def _drain(self, changes: Changes) -> None:
        assert self.fd is not None
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return
            except OSError as exc:
                self.broken = f"reading its events: {exc}"
                return
            if not data:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
                offset += EVENT.size
                name = data[offset : offset + length].rstrip(b"\0")
                offset += length
                changes.events += 1
                self._event(changes.paths, wd, mask, os.fsdecode(name))

    def _event(self, paths: set[str], wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self.broken = "its event queue overflowed (fs.inotify.max_queued_events)"
            return
        directory = self.paths.get(wd)
        if directory is None:
            return  # a watch already removed (its directory moved or deleted)
        if mask & IN_UNMOUNT:
            self.broken = f"{directory or 'the workspace'} was unmounted"
            return
        if name:
            if mask & (DIRECTORY_CHANGED if mask & IN_ISDIR else CHANGED):
                paths.add(f"{directory}/{name}" if directory else name)
            return
        if not directory and mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
            self.broken = "the workspace itself was moved or deleted"
        elif mask & IN_MOVE_SELF:
            # Its watches would report it (and what is below) under its old path: dropped;
            # its new path, if in the workspace, was reported by its new parent (walked).
            for rel in [p for p in self.watches if p == directory or p.startswith(directory + "/")]:
                gone = self.watches.pop(rel)
                del self.paths[gone]
                self._calls.rm_watch(self.fd or -1, gone)
            paths.add(directory)
        elif mask & (IN_DELETE_SELF | IN_IGNORED):
            del self.paths[wd]
            if self.watches.get(directory) == wd:
                del self.watches[directory]
            paths.add(directory)  # gone, or (its watch dropped) walked and watched again

    def close(self) -> None:
        with self._lock:
            self.fd = None
            self.broken = self.broken or "closed"
            self._closer()


def _limit(code: int) -> str:
    if code == errno.ENOSPC:
        return " (fs.inotify.max_user_watches reached)"
    if code == errno.EMFILE:
        return " (fs.inotify.max_user_instances reached)"
    return ""


_said: set[str] = set()


def say_once(reason: str) -> None:
    """Why a workspace is walked instead of watched, in the worker's log once per kind of
    reason (a limit reached is said once, not once per directory)."""
    kind = reason.split(": ", 1)[-1] if reason.startswith("cannot watch ") else reason
    if kind not in _said:
        _said.add(kind)
        log.warning(
            "workspace.watch.unavailable reason=%s: snapshots after commands walk the whole "
            "workspace until a watcher can be trusted again",
            reason,
        )
