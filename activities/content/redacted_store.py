"""The conversation store's writes, redacted: blobs on disk or in S3 hold no secret.

Activities write content to the store before their result leaves (a long tool output, the
conversation's segments), so the activity interceptor cannot see it: the store the worker
hands its activities (``worker.build_worker``) is wrapped in ``RedactedBlobs``. A blob that is
text (UTF-8: tool outputs, JSON segments) is redacted before it is hashed, so its key names
what is stored; a redaction only ever puts ``[redacted]`` inside a string, between characters
of a secret, so a JSON segment stays JSON. A blob that is not text is stored as it is.

External Storage's blobs (``treadle.activities.store.external``: serialized payloads, binary) go to
the store directly: they are encoded from what already passed the door (results, the state
made of them), and a change of length inside a protobuf would break it.

Redacting a long text takes milliseconds (a megabyte, a second): it runs in a thread
(``treadle.activities.offload``), off the event loop other activities' heartbeats share.
"""

from __future__ import annotations

from collections.abc import Sequence

from treadle.activities.content.redaction import Redactor
from treadle.activities.offload import REDACT_OVER_CHARS, off_loop
from treadle.activities.store.blobs import BlobStore

__all__ = ["RedactedBlobs"]


class RedactedBlobs:
    """A ``BlobStore`` whose ``put`` removes the worker's secrets from text first."""

    def __init__(self, blobs: BlobStore, redactor: Redactor) -> None:
        self.blobs = blobs
        self.redactor = redactor

    def describe(self) -> str:
        return self.blobs.describe()

    async def get(self, key: str) -> bytes:
        return await self.blobs.get(key)

    async def put(self, data: bytes) -> str:
        return await self.blobs.put(await off_loop(REDACT_OVER_CHARS, len(data), self._clean, data))

    async def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        size = sum(len(data) for data in blobs)
        clean = await off_loop(REDACT_OVER_CHARS, size, self._clean_all, blobs)
        return await self.blobs.put_many(clean)

    def _clean_all(self, blobs: Sequence[bytes]) -> list[bytes]:
        return [self._clean(data) for data in blobs]

    def _clean(self, data: bytes) -> bytes:
        try:
            text = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return data
        clean = self.redactor(text)
        return data if clean == text else clean.encode("utf-8", "surrogatepass")
