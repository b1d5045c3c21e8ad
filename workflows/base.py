"""What every feature's data and workflow code shares: the pydantic bases (and the lean form
of what crosses a boundary at every step), the one way to
put a validation error into words, the one way to say why an activity failed, and how soon a
call whose worker died is tried again.

Pure and deterministic, so workflows, activities and clients may all import it (and the worker
passes it through the sandbox).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from weakref import WeakKeyDictionary

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic.fields import FieldInfo
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

FIRST_RETRY = timedelta(seconds=0.5)
"""The first retry's backoff of the agent's tool, MCP and hook calls: a call interrupted by a
dead worker is retried this long after its heartbeat timeout, and a tool's own transient error
this long after it failed."""

DEAD_WORKER_RETRY = timedelta(seconds=0.1)
"""The first retry's backoff of a model call, which is what its retry policy decides only for
an attempt whose worker died (its heartbeat timed out) or that failed with an error nobody
foresaw: a provider's own errors carry their backoff (1, 2, 4 ... s, ``provider_backoff``) or
its ``Retry-After``. So a standby worker takes over a killed worker's call 0.1 s after the
heartbeat timeout (docs/benchmarks.md, recovery)."""


class Frozen(BaseModel):
    """Data that crosses a boundary: immutable, and unknown keys are an error, not dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Mutable(BaseModel):
    """Long-lived state a workflow changes in place; every assignment is validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


WHOLE: dict[str, bool] = {"whole": True}
"""Serialisation context: a ``Lean`` model with every field. For what a user reads as JSON
(``watch --json``), and for the sizes the workflow measures (recorded runs measured them whole,
so their replay decides the same)."""

_EMPTY: tuple[Any, ...] = (None, False, "", (), [], {})


def _says_nothing(value: Any) -> bool:
    return value in _EMPTY or (type(value) in (int, float) and not value)


def at_empty_default(field: FieldInfo, value: Any) -> bool:
    """``value`` says nothing: it is ``None``, ``False``, zero, empty, and the field's default,
    so leaving it out parses back to the same model. A non-empty default (a list of allowed
    commands, a limit) is always written: a reader of another version may default otherwise."""
    if field.is_required() or not _says_nothing(value):
        return False
    return bool(value == field.get_default(call_default_factory=True))


_EMPTY_DEFAULTS: WeakKeyDictionary[type[BaseModel], tuple[tuple[str, Any], ...]] = (
    WeakKeyDictionary()
)
"""Weak: a class defined again in each run's sandbox (a module not passed through) goes with it."""


def _empty_defaults(cls: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """(name, default) of the fields of ``cls`` whose default says nothing: the only ones
    ``at_empty_default`` can leave out, found once per class instead of per field per dump."""
    plan = _EMPTY_DEFAULTS.get(cls)
    if plan is None:
        plan = tuple(
            (name, field.get_default(call_default_factory=True))
            for name, field in cls.model_fields.items()
            if not field.is_required()
            and _says_nothing(field.get_default(call_default_factory=True))
        )
        _EMPTY_DEFAULTS[cls] = plan
    return plan


class Lean(Frozen):
    """Data that crosses a boundary at every step (an activity's input or result, a stream
    event): serialised without the fields left at an empty default (``at_empty_default``),
    which were a fifth of a step's history. Readers parse it as before: a missing field is its
    default. ``context=WHOLE`` writes every field."""

    @model_serializer(mode="wrap")
    def _lean(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if not isinstance(data, dict) or (info.context or {}).get("whole"):
            return data
        # What ``at_empty_default`` decides, with each class's empty defaults found once: a
        # step serialises a few dozen of these (its events, its calls), mostly at defaults.
        for name, default in _empty_defaults(type(self)):
            if name in data:
                value = getattr(self, name)
                if value is default or (_says_nothing(value) and value == default):
                    del data[name]
        return data


def lean_dump(model: BaseModel, exclude: set[str] | None = None) -> dict[str, Any]:
    """``model.model_dump(mode="json", exclude=exclude)`` without the fields, at any depth, left
    at an empty default (``at_empty_default``): the carried state of a hand-over, which is
    written twice into history."""
    data: dict[str, Any] = model.model_dump(mode="json", exclude=exclude)
    _prune(model, data)
    return data


def _prune(model: BaseModel, data: dict[str, Any]) -> None:
    fields = type(model).model_fields
    for name in [n for n in data if n in fields]:
        value = getattr(model, name)
        if at_empty_default(fields[name], value):
            del data[name]
        else:
            _prune_value(value, data[name])


def _prune_value(value: Any, data: Any) -> None:
    if isinstance(value, BaseModel) and isinstance(data, dict):
        _prune(value, data)
    elif isinstance(value, (list, tuple)) and isinstance(data, list):
        for item, dumped in zip(value, data, strict=False):
            _prune_value(item, dumped)
    elif isinstance(value, dict) and isinstance(data, dict):
        for key, item in value.items():
            if isinstance(key, str) and key in data:
                _prune_value(item, data[key])


def describe_errors(
    exc: ValidationError, root: str | None = "body", limit: int | None = None
) -> str:
    """A validation error as one line: ``where: what`` per problem, ``;``-separated.

    ``root`` names the whole value when a problem has no location (a wrong top-level type);
    ``None`` leaves such a problem bare. ``limit`` keeps only the first problems, for one-line
    CLI errors. pydantic's ``Value error, `` prefix (a validator's own message) is dropped.
    """
    problems = exc.errors(include_url=False)
    shown = problems if limit is None else problems[:limit]
    parts = []
    for err in shown:
        where = ".".join(str(part) for part in err["loc"]) or root
        message = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    text = "; ".join(parts)
    if limit is not None and len(problems) > limit:
        text += f" (and {len(problems) - limit} more)"
    return text


def failure_message(exc: ActivityError) -> str:
    """Why an activity failed, in one line.

    The activity's own ``ApplicationError`` carries the deliberate message (provider, status,
    provider text); a timeout says which timeout and, when Temporal gave up, why; only
    otherwise is the raw cause used.
    """
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return cause.message
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "activity"
        why = exc.retry_state.name.lower().replace("_", " ") if exc.retry_state else "retries over"
        return f"{kind} timeout ({why})"
    return str(cause or exc)
