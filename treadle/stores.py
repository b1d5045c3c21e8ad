"""Which store a process uses, from one setting (``treadle worker --store`` or ``TREADLE_STORE``):

    a directory          the filesystem store, the embedded default (one machine)
    s3://BUCKET/PREFIX   an S3-compatible store shared by workers on several machines; endpoint,
                         region and credentials from the standard AWS environment
                         (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
    none                 no store: whole conversations travel, every payload inline

The same setting gives the conversation store (:func:`open_blob_store`, the worker's activities)
and Temporal's External Storage (:func:`external_storage`, every client's data converter):
workers and the clients that read their runs must name the same store. The S3 backend needs
boto3 (``pip install 'treadle[s3]'``), imported only when an ``s3://`` store is named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from temporalio.converter import ExternalStorage

from treadle.activities.store.blobs import BlobStore, FileBlobStore
from treadle.activities.store.external import BlobStorageDriver
from treadle.codec import Keyring, KeyringSealer

if TYPE_CHECKING:
    from treadle.activities.store.s3 import S3Objects

__all__ = [
    "S3Url",
    "StoreLocation",
    "StoreSettingsError",
    "check_store",
    "external_storage",
    "open_blob_store",
    "parse_store",
]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# S3's bucket naming rules: 3 to 63 lowercase letters, digits, dots and hyphens.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_USAGE = "use a directory, 'none', or s3://BUCKET/PREFIX"


class StoreSettingsError(Exception):
    """The store setting cannot be used: a malformed URL, boto3 missing, a bucket that does
    not answer. One line that says what to do."""


@dataclass(frozen=True)
class S3Url:
    """``s3://BUCKET/PREFIX``: a bucket and a key prefix (empty, or ending with ``/``)."""

    bucket: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


StoreLocation = Path | S3Url


def parse_store(where: str | Path) -> StoreLocation | None:
    """The store a setting names; ``None`` for ``none``. A URL that is not ``s3://BUCKET`` with
    a valid bucket name is refused, never taken for a directory called ``s3:``."""
    if isinstance(where, Path):
        return where
    text = where.strip()
    if text == "none":
        return None
    if not _SCHEME.match(text):
        return Path(text)
    parts = urlsplit(text)
    if parts.scheme != "s3":
        raise StoreSettingsError(f"store {text!r} has an unknown scheme {parts.scheme!r}; {_USAGE}")
    if "@" in parts.netloc or ":" in parts.netloc or parts.query or parts.fragment:
        raise StoreSettingsError(
            f"store {_shown(text)!r} must be s3://BUCKET/PREFIX alone: credentials come from "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the endpoint from AWS_ENDPOINT_URL"
        )
    if not parts.netloc:
        raise StoreSettingsError(f"store {text!r} names no bucket; {_USAGE}")
    if not _BUCKET.match(parts.netloc) or ".." in parts.netloc:
        raise StoreSettingsError(
            f"store {text!r}: {parts.netloc!r} is not an S3 bucket name (3 to 63 lowercase "
            "letters, digits, dots and hyphens)"
        )
    prefix = parts.path.strip("/")
    if "//" in prefix:
        raise StoreSettingsError(f"store {text!r} has an empty segment in its prefix")
    return S3Url(parts.netloc, prefix + "/" if prefix else "")


def open_blob_store(
    location: StoreLocation | None, environ: Mapping[str, str], *, create: bool = True
) -> BlobStore | None:
    """The conversation store at ``location``; encrypted at rest when
    ``TREADLE_ENCRYPTION_KEYS`` is set in ``environ``. ``create``: a directory store's
    directory is made now if missing (a worker starting); a reader passes ``False``."""
    if location is None:
        return None
    keyring = Keyring.from_env(environ)
    sealer = KeyringSealer(keyring) if keyring else None
    if isinstance(location, Path):
        return FileBlobStore(location, sealer, create=create)
    from treadle.activities.store.s3 import S3BlobStore

    return S3BlobStore(_s3_objects(location, environ), sealer)


def external_storage(
    location: StoreLocation | None, environ: Mapping[str, str], threshold: int
) -> ExternalStorage | None:
    """Temporal's External Storage into the store at ``location``: payloads of ``threshold``
    bytes or more are stored there and the history holds a reference. On S3 it is the SDK's
    own ``S3StorageDriver``; payloads arrive already encrypted when the codec encrypts."""
    if location is None:
        return None
    if isinstance(location, Path):
        return ExternalStorage(
            drivers=[BlobStorageDriver(FileBlobStore(location))], payload_size_threshold=threshold
        )
    from temporalio.contrib.aws.s3driver import S3StorageDriver

    objects = _s3_objects(location, environ)
    return ExternalStorage(
        drivers=[S3StorageDriver(client=objects, bucket=location.bucket)],
        payload_size_threshold=threshold,
    )


def check_store(where: str | Path, environ: Mapping[str, str]) -> None:
    """Blocking: refuse a store setting that cannot work before a worker starts anything — a
    malformed one, or an S3 bucket that does not answer with these credentials."""
    location = parse_store(where)
    if not isinstance(location, S3Url):
        return
    from treadle.activities.store.s3 import S3StoreError

    try:
        _s3_objects(location, environ).check_bucket()
    except S3StoreError as exc:
        raise StoreSettingsError(str(exc)) from None


def _s3_objects(location: S3Url, environ: Mapping[str, str]) -> S3Objects:
    try:
        from treadle.activities.store.s3 import S3Objects, S3Settings
    except ImportError as exc:
        raise StoreSettingsError(
            f"store {location} needs boto3 ({exc.name} is not installed): pip install 'treadle[s3]'"
        ) from None
    return S3Objects(S3Settings.from_env(location.bucket, location.prefix, environ))


def _shown(url: str) -> str:
    """``url`` without a ``user:password@`` part."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
