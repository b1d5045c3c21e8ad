"""Looking at a workspace cheaply: what a snapshot leaves out (``Rules``), and a walk that
stats every file but reads only those whose size, times, inode or mode changed since the
worker last hashed them (``Index``).

Blocking (``os.scandir``, ``os.stat``): called in a thread by the snapshotter.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from treadle.activities.workspace.manifest import SYMLINK, Entry, State

__all__ = [
    "NOT_UTF8",
    "RACY_SECONDS",
    "Exclusions",
    "Index",
    "Rules",
    "Seen",
    "look_at",
    "recordable",
    "shown",
    "walk",
]

RACY_SECONDS = 1.0
"""A file modified this close to the moment it was looked at may change again without its
size or modification time changing (timestamps have a granularity): its hash is not trusted,
and it is read again next time (git's "racily clean" entries)."""

EXAMPLES = 5
"""Paths left out that a snapshot names, beyond the counts."""

NOT_UTF8 = "name not UTF-8"
"""The exclusion of a file (or directory) whose name is not UTF-8 (``b'bad\\xff.txt'`` from an
archive): a manifest, a trace and a check-out all carry names as text, so it cannot be recorded."""

Signature = tuple[int, int, int, int, int]
"""What tells a file changed without reading it: size, mtime_ns, ctime_ns, inode, mode."""


@dataclass(frozen=True)
class Rules:
    """What a snapshot leaves out: ignore patterns and a size cap."""

    ignore: tuple[str, ...]
    max_file_bytes: int

    def ignored(self, rel: str) -> str | None:
        """The pattern that leaves ``rel`` out, if one does (checked once per walked entry:
        literal names are a set lookup, wildcards one compiled expression)."""
        names, name_wild, paths, path_wild = _compiled(self.ignore)
        name = rel.rsplit("/", 1)[-1]
        if name in names:
            return name
        if "/" in rel and rel in paths:
            return rel
        for pattern, regex in name_wild:
            if regex.match(name):
                return pattern
        depth = rel.count("/") + 1 if path_wild else 0
        for pattern, regex in path_wild:
            if pattern.count("/") + 1 == depth and regex.match(rel):
                return pattern
        return None


Compiled = tuple[
    frozenset[str],
    tuple[tuple[str, re.Pattern[str]], ...],
    frozenset[str],
    tuple[tuple[str, re.Pattern[str]], ...],
]


@functools.lru_cache(maxsize=32)
def _compiled(ignore: tuple[str, ...]) -> Compiled:
    """The patterns split four ways: literal names, wildcard names, literal paths, wildcard
    paths (a pattern with ``/`` is a path from the workspace's root)."""
    wild = set("*?[")
    names = frozenset(p for p in ignore if "/" not in p and not wild & set(p))
    paths = frozenset(p.strip("/") for p in ignore if "/" in p and not wild & set(p))
    name_wild = tuple(
        (p, re.compile(fnmatch.translate(p))) for p in ignore if "/" not in p and wild & set(p)
    )
    path_wild = tuple(
        (p, re.compile(fnmatch.translate(p.strip("/"))))
        for p in ignore
        if "/" in p and wild & set(p)
    )
    return names, name_wild, paths, path_wild


@dataclass
class Exclusions:
    """What a walk left out: counts by reason, and a few of the paths."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, reason: str, rel: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(shown(rel))

    def describe(self) -> str:
        if not self.counts:
            return "nothing left out"
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.counts.items()))
        return f"left out {sum(self.counts.values())} ({reasons}; e.g. {', '.join(self.examples)})"


@dataclass(frozen=True)
class Known:
    """A file as last hashed: its signature then, its blob key, and whether that can be
    trusted without reading it again (it was not racily clean)."""

    signature: Signature
    key: str
    trusted: bool


@dataclass
class Index:
    """One workspace's hashes on this worker: path -> what the file was when last read."""

    files: dict[str, Known] = field(default_factory=dict)

    def remember(self, rel: str, signature: Signature, key: str, looked_at_ns: int) -> None:
        trusted = signature[1] < looked_at_ns - int(RACY_SECONDS * 1e9)
        self.files[rel] = Known(signature, key, trusted)


@dataclass
class Seen:
    """What a walk found: entries known without reading, and files to read and hash."""

    entries: State = field(default_factory=dict)
    to_hash: dict[str, Signature] = field(default_factory=dict)
    exclusions: Exclusions = field(default_factory=Exclusions)
    stats: int = 0
    """Files and directories looked at (one ``stat`` each)."""
    started_ns: int = field(default_factory=time.time_ns)
    unrecordable: list[str] = field(default_factory=list)
    """Paths left out for a name that is not UTF-8 (``NOT_UTF8``)."""
    linked: str | None = None
    """A file looked at alone that has other hard links (``look_at``): a change made through
    another of its names is not reported there, so only a whole walk can be trusted."""


Watch = Callable[[str], None]
"""Called with each directory a walk is about to read (``watch.Watcher.add``)."""


def recordable(rel: str) -> bool:
    """Whether ``rel`` is text (UTF-8): a name read from the disk that is not holds the
    surrogates Python decodes its bytes to, which no JSON or protobuf can carry."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(rel: str) -> str:
    """``rel`` as text for people: a byte that is not UTF-8 is written ``\\xff``."""
    if recordable(rel):
        return rel
    try:
        return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no disk decoding makes: show its code point
        return rel.encode("utf-8", "backslashreplace").decode("ascii")


def _signature(st: os.stat_result) -> Signature:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


def _consider(seen: Seen, index: Index, rules: Rules, rel: str, st: os.stat_result) -> None:
    """One file found: known (its entry), excluded, or to be hashed."""
    mode = st.st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        seen.exclusions.add("not a regular file", rel)
        return
    if stat.S_ISREG(mode) and st.st_size > rules.max_file_bytes:
        seen.exclusions.add(f"over {rules.max_file_bytes} bytes", rel)
        return
    signature = _signature(st)
    known = index.files.get(rel)
    entry_mode = SYMLINK if stat.S_ISLNK(mode) else stat.S_IMODE(mode)
    if known is not None and known.trusted and known.signature == signature:
        seen.entries[rel] = (known.key, entry_mode, st.st_size)
    else:
        seen.to_hash[rel] = signature


def walk(
    root: Path,
    rules: Rules,
    index: Index,
    below: str = "",
    started_ns: int | None = None,
    watch: Watch | None = None,
) -> Seen:
    """Every file of the workspace (or of its directory ``below``), stat'ed once each
    (symbolic links are not followed). ``started_ns``: now, by the snapshotter's clock;
    ``watch``: told of each directory before it is read (ignored ones are not read)."""
    seen = Seen(started_ns=time.time_ns() if started_ns is None else started_ns)
    stack: list[tuple[str, str]] = [(str(root / below), below + "/" if below else "")]
    while stack:
        directory, prefix = stack.pop()
        if watch is not None:
            watch(prefix.rstrip("/"))
        try:
            entries = list(os.scandir(directory))
        except OSError:
            seen.exclusions.add("unreadable directory", prefix.rstrip("/") or ".")
            continue
        for entry in entries:
            rel = prefix + entry.name
            if not recordable(entry.name):
                seen.exclusions.add(NOT_UTF8, rel)  # a directory: what is below it too
                seen.unrecordable.append(rel)
                continue
            pattern = rules.ignored(rel)
            if pattern is not None:
                seen.exclusions.add(pattern, rel)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # removed while we looked
            seen.stats += 1
            if stat.S_ISDIR(st.st_mode):
                stack.append((entry.path, rel + "/"))
            else:
                _consider(seen, index, rules, rel, st)
    return seen


def look_at(
    root: Path,
    rules: Rules,
    index: Index,
    paths: Iterable[str],
    previous: State,
    started_ns: int | None = None,
    watch: Watch | None = None,
) -> tuple[Seen, set[str]]:
    """Only ``paths`` (what the step's tools said they changed, or what a watcher saw), over
    the previous snapshot: what is found there, and the previous paths that ``paths`` cover
    (to drop if not found). A directory among them is walked (and its directories watched)."""
    seen = Seen(started_ns=time.time_ns() if started_ns is None else started_ns)
    covered: set[str] = set()
    directories: dict[str, bool] = {}
    for given in sorted(set(paths)):
        rel = given.strip("/")
        if not rel or rel.startswith("../") or rel == ".." or "/../" in rel:
            continue
        if not recordable(rel):
            seen.exclusions.add(NOT_UTF8, rel)
            seen.unrecordable.append(rel)
            continue
        covered.update(p for p in previous if p == rel or p.startswith(rel + "/"))
        if rules.ignored(rel) is not None or any(
            rules.ignored("/".join(rel.split("/")[:n])) for n in range(1, rel.count("/") + 1)
        ):
            continue
        if not _within(root, rel, directories, seen):
            continue  # under a symbolic link or a file now: not a path of the workspace
        full = root / rel
        try:
            st = full.lstat()
        except OSError:
            continue  # removed
        seen.stats += 1
        if stat.S_ISDIR(st.st_mode):
            inside = walk(root, rules, index, rel, seen.started_ns, watch)
            seen.entries.update(inside.entries)
            seen.to_hash.update(inside.to_hash)
            seen.unrecordable += inside.unrecordable
            seen.stats += inside.stats
        else:
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                seen.linked = rel
            _consider(seen, index, rules, rel, st)
    return seen, covered


def _within(root: Path, rel: str, directories: dict[str, bool], seen: Seen) -> bool:
    """Whether every directory above ``rel`` is a real directory (a walk would reach it):
    each one stat'ed once per look."""
    parts = rel.split("/")[:-1]
    for n in range(1, len(parts) + 1):
        above = "/".join(parts[:n])
        if above not in directories:
            try:
                directories[above] = stat.S_ISDIR((root / above).lstat().st_mode)
            except OSError:
                directories[above] = False
            seen.stats += 1
        if not directories[above]:
            return False
    return True


def read(root: Path, rel: str, signature: Signature) -> bytes:
    """A file's content to store: its bytes, or a symbolic link's target."""
    full = root / rel
    if stat.S_ISLNK(signature[4]):
        return os.fsencode(os.readlink(full))
    return full.read_bytes()


def entry_of(key: str, signature: Signature) -> Entry:
    mode = signature[4]
    return (key, SYMLINK if stat.S_ISLNK(mode) else stat.S_IMODE(mode), signature[0])
