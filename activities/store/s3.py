"""The S3-compatible store (AWS S3, MinIO, Ceph, moto...): what several workers on several
machines share, where the filesystem store serves one machine.

:class:`S3Objects` is the SDK's ``S3StorageDriverClient`` (the interface of
``temporalio.contrib.aws.s3driver``) over boto3, scoped to one bucket and key prefix. Temporal's
own ``S3StorageDriver`` uses it for External Storage; :class:`S3BlobStore` uses it for the
conversation store, so both write under the same ``s3://BUCKET/PREFIX`` with one client.

Why boto3 in threads and not the SDK's aioboto3 adapter: an aiobotocore client belongs to the
event loop it was opened in and must be closed there, but a data converter is built before any
loop runs and serves whichever loop a worker, a starter or a test uses. A boto3 client is
thread-safe, loop-free and needs no closing; each call runs in ``asyncio.to_thread``, so no
request blocks the event loop.

Errors (every message is one line, and never holds a credential)::

    TreadleError
    └── S3StoreError
        ├── S3ObjectMissing      no object under the key (the blob store says BlobMissing)
        └── S3StoreUnavailable   the endpoint, the bucket or the credentials do not work
                                 (also a ``StoreUnavailable``: a run waits until they do)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit, urlunsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from temporalio.contrib.aws.s3driver import S3StorageDriverClient

from treadle.activities.errors import StoreUnavailable, TreadleError
from treadle.activities.offload import HASH_OVER_BYTES, off_loop
from treadle.activities.store.blobs import (
    BlobCorrupt,
    BlobMissing,
    Sealer,
    check_key,
    key_of,
    open_blob,
)

if TYPE_CHECKING:
    from types_boto3_s3.client import S3Client

__all__ = [
    "S3BlobStore",
    "S3ObjectMissing",
    "S3Objects",
    "S3Settings",
    "S3StoreError",
    "S3StoreUnavailable",
]

# Temporal retries activities and workflow tasks, so every attempt shows in the history; a
# second retry layer inside boto3 would multiply waits (a dead endpoint at a worker's start
# would take tens of seconds to report).
_CONFIG = Config(
    retries={"total_max_attempts": 1, "mode": "standard"},
    connect_timeout=5,
    read_timeout=60,
)

_T = TypeVar("_T")

_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class S3StoreError(TreadleError):
    """The S3 store could not do what was asked."""


class S3ObjectMissing(S3StoreError):
    """No object under the key."""


class S3StoreUnavailable(S3StoreError, StoreUnavailable):
    """The endpoint, the bucket or the credentials do not work: refused or timed-out
    connections, 5xx answers, a bucket or a permission that is gone. Each may be mended
    while a run waits, so all are ``StoreUnavailable``."""


@dataclass(frozen=True)
class S3Settings:
    """Where the store is and how to reach it; the credentials never appear in ``repr``."""

    bucket: str
    prefix: str = ""
    """Empty, or ending with ``/``: every key of the store starts with it."""
    endpoint_url: str | None = None
    """An S3-compatible server (``AWS_ENDPOINT_URL``); ``None`` for AWS itself."""
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, bucket: str, prefix: str, environ: Mapping[str, str]) -> S3Settings:
        """Endpoint, region and credentials from the standard AWS variables in ``environ``;
        what it does not set, boto3 finds as usual (``~/.aws``, instance roles)."""

        def get(*names: str) -> str | None:
            return next((environ[n].strip() for n in names if environ.get(n, "").strip()), None)

        return cls(
            bucket=bucket,
            prefix=prefix,
            endpoint_url=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            region=get("AWS_REGION", "AWS_DEFAULT_REGION"),
            access_key_id=get("AWS_ACCESS_KEY_ID"),
            secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
            session_token=get("AWS_SESSION_TOKEN"),
        )

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def endpoint(self) -> str | None:
        """The endpoint without any ``user:password@`` part, fit for messages."""
        if self.endpoint_url is None:
            return None
        parts = urlsplit(self.endpoint_url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))

    def describe(self) -> str:
        endpoint = self.endpoint()
        return f"the S3 store {self.url}" + (f" at {endpoint}" if endpoint else "")

    def redact(self, text: str) -> str:
        """``text`` with every credential replaced: what a message may print."""
        endpoint = self.endpoint()
        if self.endpoint_url and endpoint and self.endpoint_url != endpoint:
            text = text.replace(self.endpoint_url, endpoint)  # drop its user:password@
        for secret in (self.secret_access_key, self.session_token):
            if secret:
                text = text.replace(secret, "[redacted]")
        return " ".join(text.split())


class S3Objects(S3StorageDriverClient):
    """Objects under ``s3://BUCKET/PREFIX``, for Temporal's ``S3StorageDriver`` and the blob
    store alike; keys given to it are relative to the prefix."""

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: S3Client | None = None

    def describe(self) -> Mapping[str, str]:
        """What the SDK's driver appends to its errors (never a credential)."""
        info = {"store": self.settings.url}
        endpoint = self.settings.endpoint()
        if endpoint:
            info["endpoint"] = endpoint
        if self.settings.region:
            info["region"] = self.settings.region
        return info

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, bucket, key, data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        return await asyncio.to_thread(self._exists, bucket, key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        return await asyncio.to_thread(self._get, bucket, key)

    def check_bucket(self) -> None:
        """Blocking: ``S3StoreUnavailable`` unless the bucket answers with these credentials."""
        self._call(
            "the bucket cannot be used",
            lambda: self.client().head_bucket(Bucket=self.settings.bucket),
        )

    def client(self) -> S3Client:
        # Made on first use, in whichever thread comes first: creating a boto3 client costs
        # tens of milliseconds, and a client nobody uses should cost nothing.
        with self._lock:
            if self._client is None:
                self._client = self._call("no S3 client can be made", self._new_client)
            return self._client

    def _new_client(self) -> S3Client:
        s = self.settings
        session = boto3.session.Session(
            aws_access_key_id=s.access_key_id,
            aws_secret_access_key=s.secret_access_key,
            aws_session_token=s.session_token,
            region_name=s.region,
        )
        # S3-compatible servers (MinIO, Ceph, moto) serve every bucket under one host;
        # virtual-host addressing would need DNS for BUCKET.host.
        config = (
            _CONFIG.merge(Config(s3={"addressing_style": "path"})) if s.endpoint_url else _CONFIG
        )
        return session.client("s3", endpoint_url=s.endpoint_url, config=config)

    def _key(self, key: str) -> str:
        return self.settings.prefix + key

    def _put(self, bucket: str, key: str, data: bytes) -> None:
        self._call(
            f"cannot write {key}",
            lambda: self.client().put_object(Bucket=bucket, Key=self._key(key), Body=data),
        )

    def _exists(self, bucket: str, key: str) -> bool:
        try:
            self._call(
                f"cannot look up {key}",
                lambda: self.client().head_object(Bucket=bucket, Key=self._key(key)),
                key,
            )
        except S3ObjectMissing:
            return False
        return True

    def _get(self, bucket: str, key: str) -> bytes:
        def read() -> bytes:
            return self.client().get_object(Bucket=bucket, Key=self._key(key))["Body"].read()

        return self._call(f"cannot read {key}", read, key)

    def _call(self, what: str, call: Callable[[], _T], key: str | None = None) -> _T:
        """``call()``, with boto's errors translated: ``S3ObjectMissing`` when ``key`` is not there,
        ``S3StoreUnavailable`` for the rest. The translation is raised outside the ``except``
        so it chains nothing: boto's own text quotes the endpoint URL as given, and a chained
        exception reaches logs whatever ``from None`` suppresses."""
        try:
            return call()
        except ClientError as exc:
            if key is not None and _code(exc) in _MISSING_CODES:
                failure: S3StoreError = S3ObjectMissing(
                    f"{key} is missing from {self.settings.describe()}"
                )
            else:
                failure = self._error(exc, what)
        except (BotoCoreError, ValueError) as exc:
            failure = self._error(exc, what)
        raise failure

    def _error(self, exc: Exception, what: str) -> S3StoreUnavailable:
        """One line naming the store, what failed and what to do; no credential in it."""
        if isinstance(exc, ClientError):
            code = _code(exc)
            message = exc.response.get("Error", {}).get("Message") or ""
            if code == "NoSuchBucket" or (code == "404" and "bucket" in what):
                reason = f"bucket {self.settings.bucket!r} does not exist (create it first)"
            elif code in {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
                reason = (
                    f"access denied ({code}); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
                    "and the bucket's policy"
                )
            else:
                reason = f"{code}: {message}" if message else code
        elif isinstance(exc, NoCredentialsError):
            reason = "no credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        return S3StoreUnavailable(
            self.settings.redact(f"{self.settings.describe()}: {what}: {reason}"),
            where=self.settings.describe(),
        )


class S3BlobStore:
    """Blobs as objects ``PREFIX/ab/cdef...`` (the filesystem store's layout), written with
    one ``PutObject``: S3 never shows half an object, so a killed worker leaves none."""

    def __init__(self, objects: S3Objects, sealer: Sealer | None = None) -> None:
        self.objects = objects
        self.sealer = sealer

    def describe(self) -> str:
        return self.objects.settings.describe()

    async def put(self, data: bytes) -> str:
        key = await off_loop(HASH_OVER_BYTES, len(data), key_of, data)
        if not await self._readable(key):
            sealed = await off_loop(HASH_OVER_BYTES, len(data), self._seal, data)
            await self.objects.put_object(
                bucket=self.objects.settings.bucket, key=_name(key), data=sealed
            )
        return key

    def _seal(self, data: bytes) -> bytes:
        return self.sealer.seal(data) if self.sealer else data

    async def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        return [await self.put(data) for data in blobs]  # each call is a thread's already

    async def _readable(self, key: str) -> bool:
        """Whether the object already under ``key`` reads back as its content (content-addressed:
        then there is nothing to write). One this store cannot open is written again."""
        try:
            await self.get(key)
        except (BlobMissing, BlobCorrupt):
            return False
        return True

    async def get(self, key: str) -> bytes:
        try:
            raw = await self.objects.get_object(
                bucket=self.objects.settings.bucket, key=_name(check_key(key))
            )
        except S3ObjectMissing:
            raise BlobMissing(key, self.describe()) from None
        return await off_loop(HASH_OVER_BYTES, len(raw), open_blob, key, raw, self.sealer)


def _name(key: str) -> str:
    return f"{key[:2]}/{key[2:]}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
