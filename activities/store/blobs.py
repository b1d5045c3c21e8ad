"""Content-addressed blobs: the small interface every store backend implements, and the
filesystem backend (the embedded default).

A key is the SHA-256 of the blob's plain bytes, so writing the same content twice stores it
once, a key says nothing about what it holds beyond its hash, and a blob read back can be
checked against its key. Backends may transform bytes at rest (``Sealer``: encryption), never
the key.

A store that cannot be reached or used now (a refused connection, a directory that is gone
with its unmounted volume, a full disk, denied access) raises ``StoreUnavailable`` naming the
store: infrastructure, which the run waits out (see ``treadle.activities.errors``), never a missing
or corrupt blob.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from treadle.activities.errors import StoreUnavailable, TreadleError

KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")


class BlobMissing(TreadleError):
    """A key the store does not hold: a store that lost data, or a key from another store."""

    def __init__(self, key: str, where: str) -> None:
        super().__init__(f"conversation blob {key} is missing from {where}")
        self.key = key


class BlobCorrupt(TreadleError):
    """A blob whose bytes no longer hash to its key (or cannot be unsealed)."""


class Sealer(Protocol):
    """Transforms bytes at rest, e.g. AES-GCM encryption; ``open`` undoes ``seal``."""

    def seal(self, data: bytes) -> bytes: ...

    def open(self, data: bytes) -> bytes: ...


class BlobStore(Protocol):
    """What the activities need from a store; a backend for several machines (S3) implements
    the same four calls."""

    async def put(self, data: bytes) -> str:
        """Store ``data`` (idempotent); its key. ``StoreUnavailable`` if the store cannot be
        reached or written now."""
        ...

    async def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        """Store each of ``blobs`` in order, so a later one may name an earlier one (a
        snapshot's manifest, its files); their keys. What one ``put`` each would do, in one
        call: a backend that can, hands the work to a thread once for all of them."""
        ...

    async def get(self, key: str) -> bytes:
        """The bytes stored under ``key``; ``BlobMissing`` if there are none,
        ``StoreUnavailable`` if the store cannot be reached or read now."""
        ...

    def describe(self) -> str:
        """Where the blobs live, for error messages and logs."""
        ...


def key_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_key(key: str) -> str:
    if not KEY_PATTERN.match(key):
        raise BlobCorrupt(f"not a conversation blob key: {key[:80]!r}")
    return key


class FileBlobStore:
    """Blobs as files ``ROOT/ab/cdef...`` (the first two hex digits fan out the directory).

    Writes go to a temporary file in the same directory and are renamed into place, so a
    reader never sees half a blob and a worker killed mid-write leaves no corrupt one.
    """

    def __init__(self, root: Path, sealer: Sealer | None = None) -> None:
        self.root = root
        self.sealer = sealer

    def describe(self) -> str:
        return f"the store at {self.root}"

    def _path(self, key: str) -> Path:
        check_key(key)
        return self.root / key[:2] / key[2:]

    async def put(self, data: bytes) -> str:
        # Hashed in the thread that writes it: a large blob's hash is milliseconds of CPU.
        return await asyncio.to_thread(self._write_one, data)

    def _write_one(self, data: bytes) -> str:
        key = key_of(data)
        try:
            self._write(key, data)
        except OSError as exc:
            raise self._unavailable(f"cannot write {key}", exc) from None
        return key

    async def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        return await asyncio.to_thread(self._write_all, blobs)

    def _write_all(self, blobs: Sequence[bytes]) -> list[str]:
        return [self._write_one(data) for data in blobs]

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if path.exists() and self._readable(key):
            return  # content-addressed: the same bytes are already here
        path.parent.mkdir(parents=True, exist_ok=True)
        sealed = self.sealer.seal(data) if self.sealer else data
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(sealed)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _readable(self, key: str) -> bool:
        """Whether the blob already stored under ``key`` reads back as its content. One this
        store cannot open (sealed with keys it does not hold, or plain where it seals) is
        written again rather than trusted."""
        try:
            self._read(key)
        except BlobCorrupt:
            return False
        return True

    async def get(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self._read, key)
        except OSError as exc:
            raise self._unavailable(f"cannot read {key}", exc) from None

    def _read(self, key: str) -> bytes:
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            if not self.root.is_dir():
                # The whole store is gone, not one blob: an unmounted volume, a moved directory.
                raise FileNotFoundError(f"its directory {self.root} does not exist") from None
            raise BlobMissing(key, self.describe()) from None
        return open_blob(key, raw, self.sealer)

    def _unavailable(self, what: str, exc: OSError) -> StoreUnavailable:
        reason = (exc.strerror if exc.filename is not None else None) or str(exc)
        return StoreUnavailable(
            f"{self.describe()} is unreachable: {what}: {reason or type(exc).__name__}",
            where=self.describe(),
        )


def open_blob(key: str, raw: bytes, sealer: Sealer | None) -> bytes:
    """The content of ``raw`` as stored under ``key``: unsealed, and checked against its key
    (``BlobCorrupt`` otherwise). Every backend reads through here."""
    try:
        data = sealer.open(raw) if sealer else raw
    except Exception as exc:
        raise BlobCorrupt(f"conversation blob {key} cannot be opened: {exc}") from exc
    if key_of(data) != key:
        raise BlobCorrupt(f"conversation blob {key} does not match its key")
    return data
