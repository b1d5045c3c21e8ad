"""A workspace snapshot's manifest: which file is which blob, as one small object in the
content-addressed store.

A run's snapshots form a chain: each manifest names its ``parent`` (the run's previous
snapshot) and a ``base``, and holds only the ``changes`` since that base (path -> entry, or
``None`` for a path removed). The base is chosen as in Subversion's skip-deltas: snapshot
number ``seq`` is stored against ``seq & (seq - 1)`` (``seq`` with its lowest set bit
cleared), so

- rebuilding any snapshot reads at most ``popcount(seq)`` manifests (11 for 1,000 steps),
  never the whole chain;
- a manifest holds the paths changed since its base: for one changed file per step that is
  on average ``log2(n) / 2`` entries (about 5 after 1,000 steps), so the manifests' bytes
  grow with what changed, never with the workspace's size, and no full listing is ever
  written again after the first (``seq`` 0, the workspace as first seen).

A whole manifest per step (even content-addressed per directory) would cost a listing of
every changed directory per step: a flat 10,000-file directory would be rewritten whole each
time. A plain parent chain would be as small, but a check-out of step 1,000 would read 1,000
manifests.

Stored as JSON compressed with zlib behind a magic prefix; its key is the SHA-256 of those
bytes, like every blob.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from treadle.activities.store.blobs import BlobStore, check_key

__all__ = [
    "MAGIC",
    "Entry",
    "Manifest",
    "ManifestError",
    "Manifests",
    "State",
    "base_seq",
    "changes_between",
    "check_path",
    "decode",
    "encode",
]

MAGIC = b"treadle-workspace-manifest/1\n"
"""The first bytes of every manifest blob: a key that is not a manifest is refused."""

SYMLINK = 0o120000
"""The mode bits of a symbolic link (``stat.S_IFLNK``): its blob is the link's target."""

Entry = tuple[str, int, int]
"""A file in a snapshot: (blob key, mode bits as ``st_mode``, size in bytes)."""

State = dict[str, Entry]
"""A whole workspace: relative POSIX path -> entry."""


class ManifestError(Exception):
    """A blob that is not a manifest, or one whose content makes no sense."""


def base_seq(seq: int) -> int | None:
    """The snapshot number ``seq`` is stored against (``None`` for the first, stored whole)."""
    return None if seq == 0 else seq & (seq - 1)


@dataclass(frozen=True)
class Manifest:
    """One snapshot: its place in the run's chain, its changes since its base, its counts."""

    workflow_id: str
    step: int
    seq: int
    parent: str | None
    """The key of the previous snapshot of the run (``None`` for the first)."""
    base: str | None
    """The key of snapshot ``base_seq(seq)``, which ``changes`` are relative to."""
    changes: Mapping[str, Entry | None]
    files: int
    """Files in the snapshot."""
    total_bytes: int
    changed: int
    """Paths added, changed or removed since the parent."""
    changed_bytes: int
    """Bytes of the files added or changed since the parent."""
    excluded: Mapping[str, int] = field(default_factory=dict)
    """Why things were left out -> how many (a directory left out counts once)."""
    excluded_examples: tuple[str, ...] = ()
    """A few of the paths left out, so a user sees which."""
    ignore: tuple[str, ...] = ()
    """The ignore patterns in force: a check-out leaves such paths of its target alone."""
    withheld: tuple[str, ...] = ()
    """Files left out because they hold a secret of the worker that took it (its keys never
    reach the store): a check-out leaves such paths of its target alone, as it found them."""

    @property
    def excluded_count(self) -> int:
        return sum(self.excluded.values())


def encode(manifest: Manifest) -> bytes:
    """The manifest as stored: deterministic (sorted keys), so the same snapshot taken twice
    (a retried activity) has the same key."""
    body = {
        "workflow_id": manifest.workflow_id,
        "step": manifest.step,
        "seq": manifest.seq,
        "parent": manifest.parent,
        "base": manifest.base,
        "changes": {p: (list(e) if e else None) for p, e in manifest.changes.items()},
        "files": manifest.files,
        "total_bytes": manifest.total_bytes,
        "changed": manifest.changed,
        "changed_bytes": manifest.changed_bytes,
        "excluded": dict(manifest.excluded),
        "excluded_examples": list(manifest.excluded_examples),
        "ignore": list(manifest.ignore),
    }
    if manifest.withheld:  # written only when there are some: older manifests keep their keys
        body["withheld"] = list(manifest.withheld)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return MAGIC + zlib.compress(text.encode("utf-8"), 6)


def decode(data: bytes) -> Manifest:
    """A manifest from its stored bytes; ``ManifestError`` if they are not one."""
    if not data.startswith(MAGIC):
        raise ManifestError("not a workspace manifest")
    try:
        body: dict[str, Any] = json.loads(zlib.decompress(data[len(MAGIC) :]))
        changes: dict[str, Entry | None] = {}
        for path, entry in body["changes"].items():
            check_path(path)
            if entry is None:
                changes[path] = None
            else:
                key, mode, size = entry
                changes[path] = (check_key(key), int(mode), int(size))
        return Manifest(
            workflow_id=str(body["workflow_id"]),
            step=int(body["step"]),
            seq=int(body["seq"]),
            parent=_key_or_none(body["parent"]),
            base=_key_or_none(body["base"]),
            changes=changes,
            files=int(body["files"]),
            total_bytes=int(body["total_bytes"]),
            changed=int(body["changed"]),
            changed_bytes=int(body["changed_bytes"]),
            excluded={str(k): int(v) for k, v in body.get("excluded", {}).items()},
            excluded_examples=tuple(str(p) for p in body.get("excluded_examples", ())),
            ignore=tuple(str(p) for p in body.get("ignore", ())),
            withheld=tuple(check_path(str(p)) for p in body.get("withheld", ())),
        )
    except (zlib.error, ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"a workspace manifest that does not parse: {exc}") from exc


def _key_or_none(value: Any) -> str | None:
    return None if value is None else check_key(str(value))


def check_path(path: str) -> str:
    """A manifest's path: relative, POSIX, no ``..``: a check-out never writes outside its
    directory, whatever a manifest says."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        raise ManifestError(f"a manifest path that leaves its workspace: {path!r}")
    return path


def changes_between(old: Mapping[str, Entry], new: Mapping[str, Entry]) -> dict[str, Entry | None]:
    """What turns ``old`` into ``new``: changed or added paths with their entry, removed
    paths with ``None``."""
    delta: dict[str, Entry | None] = {p: e for p, e in new.items() if old.get(p) != e}
    delta.update({p: None for p in old if p not in new})
    return delta


class Manifests:
    """Manifests read from a store, and workspaces rebuilt from them, with a small cache:
    the states on the chain of the latest snapshot are what the next one is stored against."""

    def __init__(self, store: BlobStore, keep: int = 32) -> None:
        self.store = store
        self.keep = keep
        self._manifests: dict[str, Manifest] = {}
        self._states: dict[str, State] = {}
        self.reads = 0
        """Manifests read from the store (the cost of a cold rebuild)."""

    async def get(self, key: str) -> Manifest:
        found = self._manifests.get(key)
        if found is None:
            self.reads += 1
            try:
                found = decode(await self.store.get(key))
            except ManifestError as exc:
                raise ManifestError(f"{key}: {exc}") from None
            self._remember(self._manifests, key, found)
        return found

    async def put(self, manifest: Manifest, state: State) -> str:
        """Store ``manifest`` (whose whole workspace is ``state``); its key."""
        return self.stored(await self.store.put(encode(manifest)), manifest, state)

    def stored(self, key: str, manifest: Manifest, state: State) -> str:
        """``manifest`` (whose whole workspace is ``state``) is in the store under ``key``
        (written with the files it names: ``snapshot``); kept for the next one; its key."""
        self._remember(self._manifests, key, manifest)
        self._remember(self._states, key, state)
        return key

    async def state(self, key: str) -> State:
        """The whole workspace of snapshot ``key``: its base's, with its changes applied."""
        found = self._states.get(key)
        if found is not None:
            return found
        chain: list[Manifest] = []
        at: str | None = key
        base: State = {}
        while at is not None:
            cached = self._states.get(at)
            if cached is not None:
                base = cached
                break
            manifest = await self.get(at)
            chain.append(manifest)
            at = manifest.base
        state = dict(base)
        for manifest in reversed(chain):
            for path, entry in manifest.changes.items():
                if entry is None:
                    state.pop(path, None)
                else:
                    state[path] = entry
        self._remember(self._states, key, state)
        return state

    async def chain(self, key: str) -> list[tuple[str, Manifest]]:
        """Every snapshot of the run up to ``key``, newest first, by their ``parent`` links."""
        found: list[tuple[str, Manifest]] = []
        at: str | None = key
        while at is not None:
            manifest = await self.get(at)
            found.append((at, manifest))
            at = manifest.parent
        return found

    async def key_of_seq(self, key: str, seq: int) -> str:
        """The key of snapshot number ``seq``, an ancestor on ``key``'s base chain (the base
        of the next snapshot always is one: ``seq & (seq - 1)`` clears the lowest bits)."""
        at: str | None = key
        while at is not None:
            manifest = await self.get(at)
            if manifest.seq == seq:
                return at
            if manifest.seq < seq:
                break
            at = manifest.base
        # Not on the base chain (cannot happen for a chain this module wrote): walk parents.
        at = key
        while at is not None:
            manifest = await self.get(at)
            if manifest.seq == seq:
                return at
            at = manifest.parent
        raise ManifestError(f"snapshot {seq} is not an ancestor of {key}")

    def _remember(self, cache: dict[str, Any], key: str, value: Any) -> None:
        cache.pop(key, None)
        cache[key] = value
        while len(cache) > self.keep:
            cache.pop(next(iter(cache)))
