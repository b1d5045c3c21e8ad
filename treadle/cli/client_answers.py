"""What the command line shares when a run asks its client (Loom's server query): the policy.

A run that needs something only the client has publishes a ``ClientQuery``; ``watch``, ``chat``
and ``run --wait`` answer it with the ``answer_query`` update (``treadle/cli/live/``). What
they may answer is decided here, apart from any prompt or network:

- ``file_read``: a file under the client's working directory, and nothing outside it. The path
  is resolved with its symlinks, so ``..``, an absolute path elsewhere or a link that leads out
  are refused; a file larger than the cap is sent cut, saying so; a binary file is declined.
  It is read only with the user's consent (asked on a terminal) or ``--allow-reads``.
- Files that look like secrets (`secret_file`: ``.env``, ``.netrc``, ``*.pem``, ``id_rsa*``,
  ``.git/config``, ``temporal.toml``... the list is `SECRET_FILE_NAMES`, `SECRET_DIRECTORIES`
  and `SECRET_PATHS`) are read only when the user consents at a terminal prompt that says so;
  ``--allow-reads`` alone never sends them.
- ``environment``: only the variables named with ``--env NAME``, and never one whose name holds
  KEY, TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL (in any case), even when named.
- ``question``: only a person can answer.
- Whatever is shared (a file, a variable, a typed answer) has the values of the client's own
  secret-named environment variables (the same rule, values of at least `MIN_SECRET_CHARS`)
  replaced by ``[redacted]`` (`redact`), so a file that embeds an exported key does not leak it.

Every refusal is a `Declined` with a reason the model reads as its ``ERROR:`` observation.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

# One rule for what a secret-named variable is, the worker's redaction door's: a variable the
# client never shares is one whose value the worker redacts.
from treadle.activities.content.redaction import (
    MIN_SECRET_CHARS,
    REDACTED,
    SECRET_MARKERS,
    looks_secret,
)

__all__ = [
    "DEFAULT_MAX_READ_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "SECRET_DIRECTORIES",
    "SECRET_FILE_NAMES",
    "SECRET_MARKERS",
    "SECRET_PATHS",
    "ClientPolicy",
    "Declined",
    "PathRefused",
    "Reply",
    "Shared",
    "confine",
    "environment_reply",
    "looks_secret",
    "read_reply",
    "redact",
    "requested_names",
    "secret_declined",
    "secret_file",
    "secret_path",
    "secret_values",
]

DEFAULT_MAX_READ_CHARS = 50_000
"""A file read sends at most this many characters: half of a run's default answer limit
(``client_query_max_answer_chars``), so a default run never refuses it for its size."""


SECRET_FILE_NAMES = (
    # dotenv files and shell environments
    ".env", ".env.*", "*.env", ".envrc",
    # login and registry credentials
    ".netrc", "_netrc", ".pgpass", ".my.cnf", ".pypirc", ".npmrc", ".yarnrc.yml",
    ".git-credentials", ".htpasswd", ".dockercfg", "kubeconfig*", "temporal.toml",
    # keys and certificates
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    # Terraform state and variables
    "*.tfstate", "*.tfstate.*", "*.tfvars",
    # anything that says so
    "*secret*", "*credential*", "*password*", "*passwd*",
)  # fmt: skip
"""File names (any case, ``fnmatch`` patterns) that look like secrets."""
SECRET_DIRECTORIES = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker")
"""Every file under a directory of one of these names looks like a secret."""
SECRET_PATHS = (".git/config", ".config/gcloud/*", ".config/gh/hosts.yml")
"""Path endings (any case, ``fnmatch`` patterns) that look like secrets."""

MAX_PATH_CHARS = 4_096
_NAME_SEPARATORS = re.compile(r"[\s,;]+")


@dataclass(frozen=True)
class Shared:
    """The answer's content."""

    content: str


@dataclass(frozen=True)
class Declined:
    """The client will not answer; the run's model is told why."""

    reason: str


Reply = Shared | Declined


@dataclass(frozen=True)
class ClientPolicy:
    """What this client may share, from its command line."""

    root: Path
    """The working directory file reads are confined to."""
    allow_reads: bool = False
    """Read files without asking (``--allow-reads``)."""
    env: tuple[str, ...] = ()
    """Environment variables that may be shared (``--env NAME``); secrets never are."""
    max_read_chars: int = DEFAULT_MAX_READ_CHARS
    decline: bool = False
    """Decline what no one here may answer (``--decline-queries``) instead of leaving it to
    another client."""


class PathRefused(ValueError):
    """A requested path that leads outside the working directory, or is no path at all."""


# --------------------------------------------------------------------------------------------
# File reads
# --------------------------------------------------------------------------------------------


def confine(root: Path, requested: str) -> Path:
    """The file ``requested`` names under ``root``, with every symlink resolved.

    A relative path is taken from ``root``; an absolute one must lead inside it. Raises
    `PathRefused` with the reason otherwise. Reads no file, but resolves links on disk.
    """
    if not requested.strip():
        raise PathRefused("no path was given")
    if "\0" in requested or len(requested) > MAX_PATH_CHARS:
        raise PathRefused("that is not a usable path")
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / requested))
    if target != base and not target.is_relative_to(base):
        raise PathRefused(f"{requested} is outside the client's working directory")
    return target


def secret_file(path: PurePath) -> str | None:
    """The pattern by which a file at ``path`` (relative to the working directory) looks like a
    secret, or ``None``: its name in `SECRET_FILE_NAMES`, a directory on the way in
    `SECRET_DIRECTORIES`, or its ending in `SECRET_PATHS` (any case)."""
    parts = [part.lower() for part in path.parts if part not in ("", ".", "/")]
    if not parts:
        return None
    name = parts[-1]
    for pattern in SECRET_FILE_NAMES:
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    for directory in parts[:-1]:
        if directory in SECRET_DIRECTORIES:
            return f"{directory}/*"
    joined = "/".join(parts)
    for pattern in SECRET_PATHS:
        if fnmatch.fnmatchcase(joined, pattern) or fnmatch.fnmatchcase(joined, f"*/{pattern}"):
            return pattern
    return None


def secret_path(root: Path, requested: str) -> str | None:
    """The `secret_file` pattern a requested path matches, as it was asked for or once its
    links are resolved (a harmless name that links to ``.env`` is a secret too); ``None`` when
    it matches none, or ``confine`` refuses it."""
    try:
        target = confine(root, requested)
    except PathRefused:
        return None
    base = Path(os.path.realpath(root))
    asked = PurePath(os.path.normpath(requested))
    if asked.is_absolute():
        for start in (Path(os.path.abspath(root)), base):
            if asked.is_relative_to(start):
                asked = asked.relative_to(start)
                break
        else:
            asked = PurePath(asked.name)
    return secret_file(asked) or secret_file(target.relative_to(base))


def read_reply(
    policy: ClientPolicy,
    requested: str,
    *,
    secret_ok: bool = False,
    redacting: Sequence[str] = (),
) -> Reply:
    """The file's text (cut to ``policy.max_read_chars``), or why not. Asks no one: the caller
    has the user's consent or ``--allow-reads``, and, for a file that looks like a secret,
    ``secret_ok`` (the user consented at a prompt that said so). ``redacting``: values replaced
    by ``[redacted]`` before the text is cut (see `secret_values`)."""
    try:
        path = confine(policy.root, requested)
    except PathRefused as exc:
        return Declined(str(exc))
    secret = secret_path(policy.root, requested)
    if secret is not None and not secret_ok:
        return Declined(secret_declined(requested, secret))
    if not path.exists():
        return Declined(f"{requested} does not exist in the client's working directory")
    if not path.is_file():  # a directory, or a FIFO or device a read would block on
        return Declined(f"{requested} is not a regular file")
    limit = policy.max_read_chars
    try:
        with path.open("rb") as file:
            # Enough bytes for ``limit`` characters of any UTF-8 text, plus one to know it is cut.
            raw = file.read(limit * 4 + 1)
            size = path.stat().st_size
    except FileNotFoundError:
        return Declined(f"{requested} does not exist in the client's working directory")
    except OSError as exc:
        return Declined(f"{requested} cannot be read: {exc.strerror or exc}")
    if b"\0" in raw:
        return Declined(f"{requested} is a binary file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A character cut by the read's end is not a sign of a binary file.
        if len(raw) < size and exc.start >= len(raw) - 3:
            text = raw[: exc.start].decode("utf-8")
        else:
            return Declined(f"{requested} is not UTF-8 text")
    text = redact(text, redacting)
    if len(raw) < size or len(text) > limit:
        note = f"\n[... cut: {requested} has {size} bytes; only its start is shown]"
        return Shared(text[: max(0, limit - len(note))] + note)
    return Shared(text)


def secret_declined(requested: str, pattern: str) -> str:
    """Why a file that looks like a secret was not sent (the model reads it)."""
    return (
        f"{requested} looks like a secret (it matches {pattern}); the client sends such a file "
        "only when its user consents at a terminal, never with --allow-reads alone"
    )


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def requested_names(what: str) -> tuple[str, ...]:
    """The variable names a query asks for; empty for "the environment" (``*`` or nothing)."""
    names = [n.strip().lstrip("$").strip("`'\"") for n in _NAME_SEPARATORS.split(what)]
    names = [n for n in names if n and n != "*"]
    return tuple(dict.fromkeys(names))


def environment_reply(what: str, allowed: Iterable[str], environ: Mapping[str, str]) -> Reply:
    """``NAME=value`` lines for the requested variables this client allows, or why not.

    ``*`` asks for every allowed variable. A name that is not allowed, or looks like a secret,
    is listed as not shared; when nothing at all may be shared the query is declined.
    """
    allow = tuple(dict.fromkeys(n for n in allowed if n))
    names = requested_names(what) or allow
    if not names:
        return Declined(
            "the client shares no environment variables (it would name them with --env NAME)"
        )
    shared: list[str] = []
    refused: list[str] = []
    for name in names:
        if looks_secret(name):
            refused.append(f"{name} (a secret: never shared)")
        elif name not in allow:
            refused.append(f"{name} (not in the client's --env allow-list)")
        elif name in environ:
            shared.append(f"{name}={environ[name]}")
        else:
            shared.append(f"{name} is not set")
    if not shared:
        return Declined("not shared: " + ", ".join(refused))
    if refused:
        shared.append("not shared: " + ", ".join(refused))
    return Shared("\n".join(shared))


# --------------------------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------------------------


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The values of ``environ``'s secret-named variables (`looks_secret`) that are at least
    `MIN_SECRET_CHARS` long, longest first: what `redact` hides."""
    values = {v for n, v in environ.items() if looks_secret(n) and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(values, key=lambda value: (-len(value), value)))


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of the ``secrets`` replaced by ``[redacted]`` (one pass,
    longest first, so a value holding another is hidden whole)."""
    wanted = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not wanted or not any(s in text for s in wanted):
        return text
    pattern = re.compile("|".join(re.escape(s) for s in wanted))
    return pattern.sub(REDACTED, text)
