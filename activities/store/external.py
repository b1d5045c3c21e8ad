"""Temporal External Storage over the content-addressed blob store: a payload too large to travel
inline is written once as a blob, and the history holds only a reference to it.

The blob is the payload's serialized protobuf bytes *as the data converter hands them over*: the
converter runs its payload codec before external storage, so with ``TREADLE_ENCRYPTION_KEYS`` set
the blob is already AES-GCM encrypted and the driver adds nothing. The claim is the blob's key
(the SHA-256 of those bytes), so storing the same payload twice writes it once.

Clients and workers must reach the same store: a reference written by one and read by another
that looks elsewhere is :class:`StoredPayloadMissing`, naming the key and the store.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from treadle.activities.errors import TreadleError
from treadle.activities.store.blobs import BlobMissing, BlobStore

__all__ = ["DRIVER_NAME", "BlobStorageDriver", "StoredPayloadMissing"]

DRIVER_NAME = "treadle-blobs"
"""The name references carry; every client and worker must register a driver by this name."""

_KEY = "key"


class StoredPayloadMissing(TreadleError):
    """A reference in the history names a blob the store does not hold."""

    def __init__(self, key: str, where: str) -> None:
        super().__init__(
            f"externally stored payload {key} is missing from {where}; every worker and client "
            "must use the same store (TREADLE_STORE, treadle worker --store)"
        )
        self.key = key


class BlobStorageDriver(StorageDriver):
    """Stores each payload as one blob of a :class:`BlobStore`; the claim is its key."""

    def __init__(self, store: BlobStore) -> None:
        self.blobs = store

    def name(self) -> str:
        return DRIVER_NAME

    def type(self) -> str:
        return "treadle.blob-store"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        # Deterministic serialization: the same payload is the same bytes, so the same key.
        return [
            StorageDriverClaim(
                claim_data={_KEY: await self.blobs.put(p.SerializeToString(deterministic=True))}
            )
            for p in payloads
        ]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        payloads = []
        for claim in claims:
            key = claim.claim_data.get(_KEY, "")
            try:
                data = await self.blobs.get(key)
            except BlobMissing as exc:
                raise StoredPayloadMissing(key, self.blobs.describe()) from exc
            payloads.append(Payload.FromString(data))
        return payloads
