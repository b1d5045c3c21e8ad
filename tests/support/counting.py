"""A real blob store whose reads are counted: what a worker read, never how long it took."""

from __future__ import annotations

from collections.abc import Sequence

from treadle.activities.store.blobs import BlobStore


class CountingBlobs:
    """``blobs`` as it is, with every ``get`` counted: the keys read, in order, and their
    bytes. ``reset`` starts a new count."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.reads: list[str] = []
        self.bytes = 0

    def reset(self) -> None:
        self.reads = []
        self.bytes = 0

    def describe(self) -> str:
        return self.blobs.describe()

    async def put(self, data: bytes) -> str:
        return await self.blobs.put(data)

    async def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        return await self.blobs.put_many(blobs)

    async def get(self, key: str) -> bytes:
        data = await self.blobs.get(key)
        self.reads.append(key)
        self.bytes += len(data)
        return data
