"""The hook registry and the ``run_hook`` activity that runs one hook.

The boundary, in one place::

    a HookResult                 returned as it is
    HookFailed                   a ``failed`` result: recorded in the trace, the run goes on
    HookBusy                     ApplicationError "HookBusy", retried by Temporal
    ApplicationError             kept (a hook that decided its own retryability)
    any other Exception          ApplicationError typed by the exception's class, retried; when
                                 the retries are over the workflow records the hook as failed
    an unknown hook name         a ``failed`` result (the config is checked when the run starts,
                                 so only a worker without that hook meets one)

Temporal owns the retries (``treadle.workflows.agent.messages.hooks.hook_call``); nothing here
loops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from temporalio import activity
from temporalio.exceptions import ApplicationError, FailureError

from treadle.activities import telemetry
from treadle.activities.heartbeat import heartbeating
from treadle.activities.hooks.base import Hook, HookBusy, HookFailed
from treadle.activities.hooks.git_commit import GitCommit
from treadle.workflows.agent.messages.hooks import HookRequest, HookResult

__all__ = ["HOOKS", "HookActivities"]

HOOKS: tuple[Hook, ...] = (GitCommit(),)
"""The built-in hooks every worker runs; a run's config picks some by name and they run in its
order. Your own hooks join them without an edit here: ``TreadlePlugin(hooks=[...])`` hands
them to the worker's ``HookActivities`` and names them for runs' configs
(``treadle.workflows.agent.messages.hooks.register``)."""


class HookActivities:
    """The hook activity; a class so a worker (or a test) chooses which hooks it has."""

    def __init__(self, hooks: Iterable[Hook] = HOOKS) -> None:
        by_name: dict[str, Hook] = {}
        for hook in hooks:
            if hook.name in by_name:
                raise ValueError(f"two hooks are named {hook.name!r}")
            by_name[hook.name] = hook
        self.hooks: Mapping[str, Hook] = MappingProxyType(by_name)

    @activity.defn(name="run_hook")
    async def run_hook(self, request: HookRequest) -> HookResult:
        """Run one post-tools hook; what it could not do comes back as a ``failed`` result."""
        hook = self.hooks.get(request.hook)
        if hook is None:
            known = ", ".join(self.hooks) or "none"
            result = HookResult.failure(
                request.hook, f"this worker has no hook named {request.hook!r} (it has: {known})"
            )
        else:
            with telemetry.hook_run(request.hook, request.step) as span:
                result = await _run(hook, request)
                span.finished(result.outcome != "failed")
        activity.logger.info(
            "hook.finished",
            extra={
                "hook": request.hook,
                "step": request.step,
                "outcome": result.outcome,
                "commit": result.commit,
            },
        )
        return result


async def _run(hook: Hook, request: HookRequest) -> HookResult:
    try:
        # Heartbeats let a dead worker be noticed after the heartbeat timeout; the next
        # attempt then finds whatever this one finished (hooks are idempotent per step).
        async with heartbeating(request.hook, request.step):
            return await hook.run(request)
    except HookFailed as exc:
        return HookResult.failure(request.hook, str(exc))
    except HookBusy as exc:
        raise ApplicationError(str(exc), type="HookBusy") from exc
    except FailureError:
        raise  # Temporal's own (cancellation), or a hook's deliberate ApplicationError
    except Exception as exc:
        raise ApplicationError(f"{type(exc).__name__}: {exc}", type=type(exc).__name__) from exc
