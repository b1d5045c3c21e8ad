"""Checking a snapshot out: a directory made exactly the workspace a manifest records.

Only what differs is written: a file already there with the recorded size and content (its
hash) is left alone, a file the snapshot does not have is removed, unless an ignore pattern of
the snapshot covers it (a ``node_modules`` the snapshot left out is not the snapshot's to
delete) or the snapshot withheld it for holding a secret. Files are written beside their place
and renamed over it, with the recorded permission bits within 0755 (never setuid, never
writable by others, whatever a manifest says); symbolic links as links.
Empty directories are not recorded (as in git); directories emptied by the check-out stay.

A check-out never writes outside its directory, whatever a manifest says (a shared bucket may
be written by others): no path with ``..``, none below a path the manifest makes a link (such
a manifest is refused whole), no write through a link already there (it is removed first), and
links are made last, after every file, so no write can race one.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from treadle.activities.store.blobs import BlobStore
from treadle.activities.workspace.manifest import (
    SYMLINK,
    Entry,
    ManifestError,
    Manifests,
    State,
    check_path,
)
from treadle.activities.workspace.scan import Index, Rules, walk

__all__ = ["Checkout", "bring", "materialise", "restored_mode"]

PARALLEL_READS = 16
"""Blobs read from the store at once (S3 answers each in tens of milliseconds)."""


@dataclass
class Checkout:
    """What a check-out did."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    written_bytes: int = 0


async def materialise(store: BlobStore, key: str, into: Path) -> Checkout:
    """Make ``into`` the workspace of snapshot ``key`` (created if missing)."""
    manifests = Manifests(store)
    manifest = await manifests.get(key)
    wanted = await manifests.state(key)
    return await bring(store, wanted, manifest.ignore, into, withheld=manifest.withheld)


async def bring(
    store: BlobStore,
    wanted: State,
    ignore: tuple[str, ...],
    into: Path,
    index: Index | None = None,
    *,
    withheld: tuple[str, ...] = (),
) -> Checkout:
    """Make ``into`` exactly ``wanted`` (outside the ``ignore`` patterns). ``index``: what a
    snapshotter last hashed there, so a file whose size and times it trusts is not read again
    (a worker bringing its own copy up to date reads only what changed). A ``withheld`` file
    (it held a secret: the snapshot has no copy) is left as it is, where it is."""
    _check_links(wanted)
    into.mkdir(parents=True, exist_ok=True)
    rules = Rules(ignore, max_file_bytes=2**63)
    have, known = await asyncio.to_thread(_present, into, rules, index or Index())
    done = Checkout()
    for rel in sorted(set(have) - set(wanted) - set(withheld)):
        await asyncio.to_thread(_remove, into / rel)
        done.removed.append(rel)
    todo = [
        (rel, entry)
        for rel, entry in sorted(wanted.items())
        if not (
            known.get(rel) == entry
            or (
                rel not in known and await asyncio.to_thread(_same, into, rel, entry, have.get(rel))
            )
        )
    ]
    done.unchanged = len(wanted) - len(todo)
    limit = asyncio.Semaphore(PARALLEL_READS)

    async def fetch(rel: str, entry: Entry) -> None:
        async with limit:
            data = await store.get(entry[0])
        await asyncio.to_thread(_write, into, check_path(rel), entry, data)
        done.written_bytes += len(data)

    await asyncio.gather(*(fetch(rel, entry) for rel, entry in todo if entry[1] != SYMLINK))
    for rel, entry in todo:  # links last, one at a time: no file is written after one is made
        if entry[1] == SYMLINK:
            await fetch(rel, entry)
    done.written = [rel for rel, _ in todo]
    return done


def restored_mode(mode: int) -> int:
    """The mode a check-out gives a file recorded with ``mode``: a link stays a link; a file
    keeps its permission bits within 0755 (never setuid, setgid or sticky, never writable by
    others than its owner: 0777 comes back 0755, 0666 as 0644, a private 0600 stays 0600)."""
    if mode == SYMLINK:
        return SYMLINK
    return stat.S_IMODE(mode) & 0o755


def _check_links(wanted: State) -> None:
    """``ManifestError`` for a path outside the directory or below one of the manifest's
    links (``d`` a link, ``d/f`` a file: writing it would write where the link points)."""
    links = {check_path(rel) for rel, entry in wanted.items() if entry[1] == SYMLINK}
    for rel in wanted:
        check_path(rel)
        parts = rel.split("/")
        for n in range(1, len(parts)):
            if "/".join(parts[:n]) in links:
                raise ManifestError(
                    f"a manifest path below one of its symbolic links: {rel!r} (refused whole: "
                    "writing it would write where the link points)"
                )


def _present(into: Path, rules: Rules, index: Index) -> tuple[dict[str, tuple[int, int]], State]:
    """The files already in ``into`` (outside its ignore patterns): path -> (size, mode), and
    the entries of those ``index`` knows unchanged."""
    seen = walk(into, rules, index)
    have = {rel: (sig[0], sig[4]) for rel, sig in seen.to_hash.items()}
    have.update({rel: (entry[2], 0) for rel, entry in seen.entries.items()})
    return have, seen.entries


def _same(into: Path, rel: str, entry: Entry, present: tuple[int, int] | None) -> bool:
    """Whether the file at ``rel`` is already the entry: same kind, size, mode and content."""
    if present is None:
        return False
    size, mode = present
    key, want_mode, want_size = entry
    path = into / rel
    if want_mode == SYMLINK:
        if not stat.S_ISLNK(mode):
            return False
        return hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest() == key
    if (
        not stat.S_ISREG(mode)
        or size != want_size
        or stat.S_IMODE(mode) != restored_mode(want_mode)
    ):
        return False
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() == key


def _write(into: Path, rel: str, entry: Entry, data: bytes) -> None:
    path = into / rel
    _clear_the_way(into, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.treadle-checkout")
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    if entry[1] == SYMLINK:
        os.symlink(os.fsdecode(data), temporary)
    else:
        temporary.write_bytes(data)
        os.chmod(temporary, restored_mode(entry[1]))
    if path.is_dir() and not path.is_symlink():
        _remove(path)
    os.replace(temporary, path)


def _clear_the_way(into: Path, rel: str) -> None:
    """A file (or link) where the snapshot has a directory on ``rel``'s way is removed."""
    at = into
    for part in rel.split("/")[:-1]:
        at = at / part
        if at.is_symlink() or (at.exists() and not at.is_dir()):
            at.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        for child in path.iterdir():
            _remove(child)
        path.rmdir()
