"""The workflow sandbox every worker and replayer uses, without its per-payload toll.

With a payload codec or External Storage set (every Treadle client has both), the SDK asks a
run, for each payload sequence of an activation and of its completion, which serialization
context and which store context apply: a step has about eighteen. The sandboxed runner answers
each one by compiling a snippet and executing it inside the sandbox with its importer applied
(``builtins`` and ``sys.modules`` swapped in and out): ~40 µs a question, ~1.4 ms of a replayed
step, most of what the sandbox added to a replay (docs/benchmarks.md, sixth round). The answer
is a look-up in the run's pending commands, made by the SDK's own instance (its module is passed
through the sandbox, so it imports nothing and runs no workflow code).
``LeanSandboxedWorkflowRunner`` asks that instance directly; every activation, and so every line
of workflow code, still runs in the sandbox with its restrictions.

The SDK's runner is marked unstable and the shapes used here are private (``_Instance`` and its
``__temporal_in_sandbox`` global; temporalio 1.35). Where a future SDK changes them, the SDK's
own path answers: checked once per run's instance, never a failure.

:func:`workflow_runner` is the runner every Treadle worker and replayer uses, with Treadle's
workflow code passed through (``PASSTHROUGH_MODULES``); :func:`with_treadle` makes a runner a
worker was already given (the SDK's default, or one another plugin adjusted) into it.
"""

from __future__ import annotations

from typing import Any

from temporalio.converter import SerializationContext
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import WorkflowRunner, _command_aware_visitor
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

__all__ = ["PASSTHROUGH_MODULES", "LeanSandboxedWorkflowRunner", "with_treadle", "workflow_runner"]

# Workflow code, passed through the sandbox whole: treadle.workflows is deterministic code only
# (tests/architecture scans every module of it for clocks, randomness and I/O), so one import per
# worker serves every run, instead of one per run and per replay after a cache miss (each module
# left out cost 6-7 ms a run), and the pydantic classes the data converter builds are the ones
# the workflow sees. The registries a process fills while it sets up (your own tools, hooks and
# model providers: TreadlePlugin) live there too, and the sandbox must see that one copy. A new
# module or room is covered the day it is written. treadle/__init__.py itself is re-imported per
# run (the sandbox imports a passed-through module's parents its own way): it imports nothing.
PASSTHROUGH_MODULES = ("treadle.workflows",)

_IN_SANDBOX = "__temporal_in_sandbox"


class _LeanInstance(sdk_runner._Instance):
    """One run's sandbox, its payload contexts read from its instance."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        inner: Any = self.globals_and_locals.get(_IN_SANDBOX)
        # The SDK's in-sandbox instance, when it has the expected shape (else: the SDK's path).
        self._inner: Any = (
            inner
            if callable(getattr(inner, "get_serialization_context", None))
            and callable(getattr(inner, "get_external_store_context", None))
            else None
        )

    def get_serialization_context(
        self, command_info: _command_aware_visitor.CommandInfo | None
    ) -> SerializationContext | None:
        if self._inner is None:
            return super().get_serialization_context(command_info)
        result: SerializationContext | None = self._inner.get_serialization_context(command_info)
        return result

    def get_external_store_context(
        self, command_info: _command_aware_visitor.CommandInfo | None
    ) -> StorageDriverStoreContext:
        if self._inner is None:
            return super().get_external_store_context(command_info)
        result: StorageDriverStoreContext = self._inner.get_external_store_context(command_info)
        return result


class LeanSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` whose runs answer payload-context questions directly."""

    def create_instance(self, det: Any) -> Any:
        return _LeanInstance(det, self.runner_class, self.restrictions)


def workflow_runner() -> LeanSandboxedWorkflowRunner:
    """The sandbox every Treadle worker and the replay tests use, Treadle's code passed through."""
    return LeanSandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def with_treadle(runner: WorkflowRunner | None) -> WorkflowRunner:
    """``runner`` as a Treadle worker runs it: a sandbox keeps its restrictions (what another
    plugin passed through, say), plus Treadle's pass-through, as a ``LeanSandboxedWorkflowRunner``;
    a worker that runs its workflows unsandboxed keeps its runner."""
    if runner is None:
        return workflow_runner()
    if not isinstance(runner, SandboxedWorkflowRunner):
        return runner
    return LeanSandboxedWorkflowRunner(
        restrictions=runner.restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES),
        runner_class=runner.runner_class,
    )
