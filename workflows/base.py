"""What every feature's data and workflow code shares: the two pydantic bases, the one way to
put a validation error into words, the one way to say why an activity failed, and how soon a
call whose worker died is tried again.

Pure and deterministic, so workflows, activities and clients may all import it (and the worker
passes it through the sandbox).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, ValidationError
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

FIRST_RETRY = timedelta(seconds=0.5)
"""The first retry's backoff of the agent's calls (model, tools, MCP, hooks). A call interrupted
by a dead worker is retried this long after its heartbeat timeout, so the pair decides how fast
a replacement takes over; a provider's own errors back off longer (``provider_backoff``)."""


class Frozen(BaseModel):
    """Data that crosses a boundary: immutable, and unknown keys are an error, not dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Mutable(BaseModel):
    """Long-lived state a workflow changes in place; every assignment is validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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
