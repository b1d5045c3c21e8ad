"""Optional AES-GCM encryption of everything Treadle writes to Temporal.

    TREADLE_ENCRYPTION_KEYS="k2:<base64 key>,k1:<base64 key>"

The first key encrypts; every listed key decrypts, so keys rotate by putting a new one first and
keeping the old ones while any history still needs them. A key is 16, 24 or 32 random bytes,
base64-encoded (``openssl rand -base64 32``). The setting is read where connections are made
(``treadle.connection.connect``, the codec server), never at import time.

An encrypted payload carries ``encoding: binary/encrypted`` and ``encryption-key-id: <id>`` in its
metadata; its data is a fresh 12-byte nonce followed by the AES-GCM ciphertext of the whole
original payload (metadata included, so the original encoding is hidden and comes back on
decode). The key id is the associated data: a payload relabelled with another id fails to decrypt.
Payloads that are not encrypted decode unchanged, so histories written before encryption was
turned on stay readable.

:class:`Keyring` encrypts bytes (``encrypt`` / ``decrypt``) as well as payloads, for stores
outside Temporal's history that must be encrypted with the same keys.

The error tree (every message is one line and never shows key material)::

    EncryptionError
    ├── EncryptionSettingsError   TREADLE_ENCRYPTION_KEYS cannot be used
    ├── KeysNotSet                an encrypted payload met a process without the setting
    ├── UnknownKeyError           data encrypted with a key id the keyring lacks
    ├── DecryptionFailed          the key id is known but the data does not authenticate
    │                             (another key under the same id, or altered data)
    └── WorkerCannotDecrypt       one of the above met by the worker answering a query (the
                                  run's history holds data the worker's keys cannot read)
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

__all__ = [
    "ENCODING",
    "ENV_VAR",
    "KEY_ID_METADATA",
    "READER_ERRORS",
    "DecryptionFailed",
    "EncryptionCodec",
    "EncryptionError",
    "EncryptionSettingsError",
    "Keyring",
    "KeysNotSet",
    "NoKeysCodec",
    "Sealed",
    "UnknownKeyError",
    "WorkerCannotDecrypt",
]

ENV_VAR = "TREADLE_ENCRYPTION_KEYS"
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
NONCE_BYTES = 12
KEY_SIZES = (16, 24, 32)
_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class EncryptionError(Exception):
    """Base of the errors raised while encrypting or decrypting."""


class EncryptionSettingsError(EncryptionError):
    """The keys setting is malformed."""


class KeysNotSet(EncryptionError):
    """An encrypted payload reached a process that has no keys."""


class UnknownKeyError(EncryptionError):
    """Data was encrypted with a key id that is not in the keyring."""

    def __init__(self, key_id: str, known: Sequence[str]) -> None:
        super().__init__(
            f"data encrypted with key id {key_id!r}, which {ENV_VAR} does not hold "
            f"(it has {', '.join(repr(k) for k in known)}); add that key after the first one"
        )
        self.key_id = key_id


class DecryptionFailed(EncryptionError):
    """The data did not authenticate under the key its id names."""


class WorkerCannotDecrypt(EncryptionError):
    """The worker that answered a query could not decrypt the run's history (its message is the
    worker's own error, naming the key id)."""


READER_ERRORS = frozenset({"KeysNotSet", "UnknownKeyError", "DecryptionFailed"})
"""The error types a reader meets for data it cannot decrypt, by name: a failure reported by
another process (a worker) carries its type as a name."""


@dataclass(frozen=True)
class Sealed:
    """Encrypted bytes and the id of the key that encrypted them (both needed to decrypt)."""

    key_id: str
    data: bytes
    """The 12-byte nonce followed by the AES-GCM ciphertext and tag."""


class Keyring:
    """Named AES-GCM keys: the first encrypts, all decrypt."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise EncryptionSettingsError("an encryption keyring needs at least one key")
        self._keys: dict[str, AESGCM] = {}
        for key_id, key in keys:
            if not _KEY_ID.match(key_id):
                raise EncryptionSettingsError(
                    f"key id {key_id!r} must be 1-64 letters, digits, '.', '_' or '-'"
                )
            if key_id in self._keys:
                raise EncryptionSettingsError(f"key id {key_id!r} is listed twice")
            if len(key) not in KEY_SIZES:
                raise EncryptionSettingsError(
                    f"key {key_id!r} is {len(key)} bytes; AES-GCM keys are 16, 24 or 32 bytes "
                    "(make one with: openssl rand -base64 32)"
                )
            self._keys[key_id] = AESGCM(key)
        self.primary_id = keys[0][0]
        """The id of the key that encrypts."""

    @property
    def key_ids(self) -> list[str]:
        """Every key id, the encrypting one first."""
        return list(self._keys)

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """``"keyid:base64key[,oldid:base64key...]"``, as in ``TREADLE_ENCRYPTION_KEYS``."""
        keys = []
        for number, entry in enumerate(text.split(","), start=1):
            key_id, colon, encoded = entry.strip().partition(":")
            if not colon or not key_id or not encoded:
                raise EncryptionSettingsError(
                    f"{ENV_VAR} entry {number} is not keyid:base64key "
                    "(entries are separated by commas)"
                )
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise EncryptionSettingsError(
                    f"{ENV_VAR}: the key for {key_id!r} is not valid base64"
                ) from None
            keys.append((key_id, key))
        try:
            return cls(keys)
        except EncryptionSettingsError as exc:
            raise EncryptionSettingsError(f"{ENV_VAR}: {exc}") from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Keyring | None:
        """The keyring ``TREADLE_ENCRYPTION_KEYS`` describes; ``None`` when it is not set.

        Set but empty is an error, not "off": a secret that failed to reach the process must not
        quietly turn encryption off.
        """
        text = environ.get(ENV_VAR)
        if text is None:
            return None
        if not text.strip():
            raise EncryptionSettingsError(
                f"{ENV_VAR} is set but empty; unset it to turn encryption off"
            )
        return cls.parse(text)

    def encrypt(self, plaintext: bytes) -> Sealed:
        """Encrypt with the first key and a fresh random nonce."""
        nonce = os.urandom(NONCE_BYTES)
        cipher = self._keys[self.primary_id]
        return Sealed(
            self.primary_id, nonce + cipher.encrypt(nonce, plaintext, self.primary_id.encode())
        )

    def decrypt(self, sealed: Sealed) -> bytes:
        """Decrypt with the key ``sealed.key_id`` names."""
        cipher = self._keys.get(sealed.key_id)
        if cipher is None:
            raise UnknownKeyError(sealed.key_id, self.key_ids)
        nonce, ciphertext = sealed.data[:NONCE_BYTES], sealed.data[NONCE_BYTES:]
        try:
            return cipher.decrypt(nonce, ciphertext, sealed.key_id.encode())
        except (InvalidTag, ValueError):
            raise DecryptionFailed(
                f"data encrypted with key id {sealed.key_id!r} does not decrypt with the key "
                f"{ENV_VAR} holds under that id (another key with the same id, or altered data)"
            ) from None

    def encrypt_payload(self, payload: Payload) -> Payload:
        """The payload, whole, as a ``binary/encrypted`` payload."""
        sealed = self.encrypt(payload.SerializeToString())
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: sealed.key_id.encode()},
            data=sealed.data,
        )

    def decrypt_payload(self, payload: Payload) -> Payload:
        """The original of an encrypted payload; any other payload unchanged."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if raw_id is None:
            raise DecryptionFailed(f"an encrypted payload has no {KEY_ID_METADATA!r} metadata")
        key_id = raw_id.decode("utf-8", errors="replace")
        plaintext = self.decrypt(Sealed(key_id, payload.data))
        try:
            return Payload.FromString(plaintext)
        except DecodeError:
            raise DecryptionFailed(
                f"a payload decrypted with key id {key_id!r} is not a Temporal payload"
            ) from None


class EncryptionCodec(PayloadCodec):
    """Temporal's payload codec over a :class:`Keyring`.

    AES-GCM runs at gigabytes per second and Temporal caps payloads at a few megabytes, so the
    work is done inline rather than in a thread.
    """

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.keyring.encrypt_payload(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.keyring.decrypt_payload(p) for p in payloads]


class NoKeysCodec(PayloadCodec):
    """The codec of a process without keys: payloads pass unchanged, and an encrypted one is a
    clear :class:`KeysNotSet` instead of the converter's "Unknown payload encoding" traceback."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCODING:
                key_id = payload.metadata.get(KEY_ID_METADATA, b"?").decode(errors="replace")
                raise KeysNotSet(
                    f"data encrypted with key id {key_id!r}, but {ENV_VAR} is not set; "
                    "set it to the keys the workers use"
                )
        return list(payloads)


class KeyringSealer:
    """Encrypts conversation-store blobs at rest with the same keys as payloads: each blob is
    ``key id``, a newline, then the nonce and AES-GCM ciphertext (so keys rotate as for
    history)."""

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring

    def seal(self, data: bytes) -> bytes:
        sealed = self._keyring.encrypt(data)
        return sealed.key_id.encode() + b"\n" + sealed.data

    def open(self, data: bytes) -> bytes:
        key_id, newline, rest = data.partition(b"\n")
        if not newline:
            raise DecryptionFailed("a stored blob is not encrypted, but keys are set")
        return self._keyring.decrypt(Sealed(key_id.decode(errors="replace"), rest))
