"""The worker's secrets, removed from every text that leaves an activity.

Redaction is by value and by shape. By value: every secret the worker knows (its configured API
keys, the values of its secret-named environment variables, see ``worker_secrets``), in any
letter case, whole or in part: any ``MIN_FRAGMENT`` (8) or more consecutive characters of a
secret of at least ``FRAGMENT_KEY_LENGTH`` (16) characters, even when quotes, backslashes or
whitespace are inserted between them (a proxy that quotes the key in pieces, a file that wraps
it); a shorter secret is redacted only whole (in any case, across the same separators). By
shape: text that can only be a credential (``KEY_SHAPES``: ``sk-...``, ``sk-ant-...``,
``AKIA...``, GitHub and Slack tokens), configured here or not. Error text is also cut at the
looser shapes providers quote (``redact_error``: ``key-...``, ``token-...``, ``sk-****abcd``),
which in ordinary content (``key-value-store``) would be words.

The worker builds one ``Redactor`` at start (``worker.build_worker``) and the activity
interceptor (``treadle.activities.content.interceptor``) makes it the ``current()`` one while an
activity runs, so code that sends content out by another route than the activity's result (the live
stream, spans, the store) redacts with the same secrets. Nothing here reads the environment
when imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from enum import Enum
from typing import Any, TypeVar, cast

from pydantic import BaseModel

__all__ = [
    "ERROR_SHAPES",
    "FRAGMENT_KEY_LENGTH",
    "KEY_SHAPES",
    "MIN_FRAGMENT",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "SECRET_MARKERS",
    "Redactor",
    "current",
    "looks_secret",
    "redact",
    "redact_error",
    "redacted",
    "secret_values",
    "using",
    "worker_secrets",
]

REDACTED = "[redacted]"
MIN_FRAGMENT = 8
"""Consecutive characters of a secret that are redacted wherever they appear (any letter case)."""
FRAGMENT_KEY_LENGTH = 16
"""Secrets at least this long are redacted in fragments of ``MIN_FRAGMENT``; shorter ones whole."""
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
"""An environment variable whose name contains one of these (any case) holds a secret: the
rule the client-answer path uses (``treadle.cli.client_answers``)."""
MIN_SECRET_CHARS = 8
"""Shorter values of secret-named variables are not secrets (they would match ordinary text)."""

_SEPARATORS = frozenset(" \t\r\n\f\v'\"`\\")
"""Characters a proxy may put between the pieces of a key it quotes; skipped when matching."""
_DROP_SEPARATORS = str.maketrans(dict.fromkeys(_SEPARATORS))

KEY_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}"  # OpenAI (sk-..., sk-proj-...) and Anthropic (sk-ant-...)
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{30,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bAIza[0-9A-Za-z_-]{35}"  # Google API keys
)
"""Text that can only be a credential, redacted from everything."""
ERROR_SHAPES = re.compile(r"\b(sk|key|token)-[A-Za-z0-9_*.-]{6,}", re.IGNORECASE)
"""Key-like words in error text (a provider's masked ``sk-proj-****abcd``), redacted from
errors only: in content they are words (``key-value-store``)."""

_HASH = re.compile(r"[0-9a-f]{64}")
"""A store key (SHA-256): never content, and never to be broken by a chance fragment match."""


def _fold(char: str) -> str:
    """One character in lower case, when that is one character (``İ`` lowers to two)."""
    lower = char.lower()
    return lower if len(lower) == 1 else char


class Redactor:
    """Removes the worker's secrets from text; see the module docstring for what is matched.
    Built once per worker from every secret it knows."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        grams: dict[int, set[str]] = {}
        for secret in secrets:
            folded = "".join(_fold(c) for c in secret or "" if c not in _SEPARATORS)
            if not folded:
                continue
            size = MIN_FRAGMENT if len(folded) >= FRAGMENT_KEY_LENGTH else len(folded)
            found = grams.setdefault(size, set())
            found.update(folded[i : i + size] for i in range(len(folded) - size + 1))
        self._grams = {size: frozenset(found) for size, found in grams.items()}
        # One C-speed search for any fragment in the text lowered, separators dropped, before
        # the exact walk. A fragment with a character whose lower case is longer cannot be
        # looked for that way; then every text takes the exact path.
        every = sorted({g for found in grams.values() for g in found}, key=len, reverse=True)
        quick = every and all(g.lower() == g for g in every)
        self._any_gram = re.compile("|".join(map(re.escape, every))) if quick else None

    def __repr__(self) -> str:  # never print a key, not even a fragment
        return f"Redactor({sum(len(g) for g in self._grams.values())} fragments)"

    def __bool__(self) -> bool:
        return True  # a redactor without secrets still removes key shapes

    def __call__(self, text: str) -> str:
        """``text`` without any secret (whole, in part, in any case) or key-shaped word."""
        if self._grams and self._may_hold_secret(text):
            text = self._remove_secrets(text)
        return "".join(KEY_SHAPES.sub(REDACTED, text[a:b]) for a, b in _pieces(text))

    def finds(self, text: str) -> bool:
        """Whether ``text`` may hold something to redact (never ``False`` when it does)."""
        return any(KEY_SHAPES.search(text, a, b) for a, b in _pieces(text)) or (
            bool(self._grams) and self._may_hold_secret(text)
        )

    def _may_hold_secret(self, text: str) -> bool:
        """A quick, C-speed look for any fragment; ``False`` means none is there. A long text
        is looked through in overlapping pieces (``PIECE_CHARS``)."""
        if self._any_gram is None:
            return True
        folded = text.translate(_DROP_SEPARATORS).lower()
        overlap = max(self._grams) - 1
        return any(
            self._any_gram.search(folded, start, start + PIECE_CHARS + overlap)
            for start in range(0, max(len(folded), 1), PIECE_CHARS)
        )

    def _remove_secrets(self, text: str) -> str:
        # Match on the text folded to lower case with separators skipped, remembering where each
        # kept character came from; every run covered by fragments is cut from the original,
        # separators inside it included.
        where = [i for i, c in enumerate(text) if c not in _SEPARATORS]
        folded = "".join(_fold(text[i]) for i in where)
        covered = bytearray(len(folded) + 1)
        for size, grams in self._grams.items():
            for start in range(len(folded) - size + 1):
                if folded[start : start + size] in grams:
                    covered[start : start + size] = b"\x01" * size
        if not any(covered):
            return text
        pieces: list[str] = []
        done = 0  # text[:done] is handled
        run = None
        for index, flag in enumerate(covered):
            if flag and run is None:
                run = index
            elif not flag and run is not None:
                first, last = where[run], where[index - 1]
                pieces += [text[done:first], REDACTED]
                done, run = last + 1, None
        pieces.append(text[done:])
        return "".join(pieces)


PIECE_CHARS = 64 * 1024
"""A long text is searched in pieces of about this many characters. One regular-expression
search holds the GIL to its end, and so the worker's event loop, even when the redaction runs
in a thread (``treadle.activities.offload``): a megabyte searched whole held it ~100 ms."""
_PIECE_END = re.compile("[ \n]")


def _pieces(text: str) -> Iterator[tuple[int, int]]:
    """Bounds of pieces of ``text`` of about ``PIECE_CHARS``, each cut just before a space or a
    line end (a piece longer when there is none): no key shape holds either, and either is a
    non-word character, so ``KEY_SHAPES`` (``\b`` included) finds in the pieces what it finds
    in the whole."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        cut = max(text.rfind(" ", start + 1, end), text.rfind("\n", start + 1, end))
        if cut < 0:
            found = _PIECE_END.search(text, end)
            if found is None:
                break
            cut = found.start()
        yield start, cut
        start = cut
    yield start, len(text)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``Redactor(secrets)(text)``: for one-off use; a worker builds its ``Redactor`` once."""
    return Redactor(secrets)(text)


def redact_error(text: str, redactor: Redactor | None = None) -> str:
    """Error text as it may leave: no secret and no key-like word (``ERROR_SHAPES`` too)."""
    return ERROR_SHAPES.sub(REDACTED, (redactor or current())(text))


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def _is_path(value: str) -> bool:
    """A file's path (``GOOGLE_APPLICATION_CREDENTIALS=/etc/key.json``) names where a secret
    is, and is no secret: redacting its fragments would cut every path under the same home."""
    return value.startswith(("/", "~", "./", "../")) and not any(c.isspace() for c in value)


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The values of ``environ``'s secret-named variables (``looks_secret``) that are at least
    ``MIN_SECRET_CHARS`` long and not a file's path, longest first."""
    values = {
        value
        for name, value in environ.items()
        if looks_secret(name) and len(value) >= MIN_SECRET_CHARS and not _is_path(value)
    }
    return tuple(sorted(values, key=lambda value: (-len(value), value)))


def worker_secrets(
    keys: Iterable[str | None], environ: Mapping[str, str], names: Iterable[str] = ()
) -> tuple[str, ...]:
    """Every secret a worker knows: its configured ``keys``, its secret-named variables, and the
    variables it was told hold secrets (``names``: those an MCP config passes to its servers)."""
    named = (environ.get(name, "") for name in names)
    chosen = [*(k for k in keys if k), *(v for v in named if len(v) >= MIN_SECRET_CHARS)]
    return tuple(dict.fromkeys([*chosen, *secret_values(environ)]))


_current: ContextVar[Redactor | None] = ContextVar("treadle_redactor", default=None)
_SHAPES_ONLY = Redactor()


def current() -> Redactor:
    """The redactor of the worker running this activity; outside one (a tool called directly,
    as tests do), one that removes key shapes only."""
    return _current.get() or _SHAPES_ONLY


@contextlib.contextmanager
def using(redactor: Redactor) -> Iterator[None]:
    """Make ``redactor`` the ``current()`` one inside the block (and the tasks it starts)."""
    token = _current.set(redactor)
    try:
        yield
    finally:
        _current.reset(token)


T = TypeVar("T")


def redacted(value: T, redactor: Redactor | None = None) -> T:
    """``value`` with every string in it redacted: a string, a pydantic model, a dataclass, or
    lists, tuples and dicts of them, walked to the bottom. The same object when nothing changed
    (so a result without secrets leaves exactly as it was); a changed model is a copy of the same
    type, its fields replaced without validation (the shape does not change)."""
    redactor = redactor or current()
    # One look at every string joined (a separator no fragment or shape spans) first: most
    # results hold no secret, and walking them string by string costs far more.
    if not redactor.finds("\x00".join(_strings(value))):
        return value
    return cast(T, _walk(value, redactor))


def _strings(value: Any) -> Iterator[str]:
    """Every string ``_walk`` would look at (dict keys too)."""
    if type(value) is str:
        yield value
    elif value is None or isinstance(value, (bool, int, float, bytes, Enum)):
        return
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _strings(getattr(value, name))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)


def _walk(value: Any, redact_text: Redactor) -> Any:
    if type(value) is str:
        if _HASH.fullmatch(value):
            return value
        new = redact_text(value)
        return value if new == value else new
    if value is None or isinstance(value, (bool, int, float, bytes, Enum)):
        return value
    if isinstance(value, BaseModel):
        changes = {}
        for name in type(value).model_fields:
            field = getattr(value, name)
            new = _walk(field, redact_text)
            if new is not field:
                changes[name] = new
        return value.model_copy(update=changes) if changes else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            field = getattr(value, f.name)
            new = _walk(field, redact_text)
            if new is not field:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (list, tuple)):
        items = [_walk(item, redact_text) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return type(value)(items) if type(value) in (list, tuple) else items
    if isinstance(value, dict):
        pairs = [(_walk(k, redact_text), _walk(v, redact_text)) for k, v in value.items()]
        if all(nk is k and nv is v for (nk, nv), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value
