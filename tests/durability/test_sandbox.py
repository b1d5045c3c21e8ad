"""The sandbox every worker and replayer runs (``treadle.sandbox``): a run's payload contexts
are the SDK's own answers, read without entering the sandbox for each payload sequence; the
workflow code itself still runs sandboxed; a future SDK without the expected private shape gets
the SDK's own path.

Replays of recorded runs through a codec that writes down every context it is handed: the
lean runner and the SDK's runner must hand the same ones, in the same order.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

from tests.support.clock_workflow import ReadsTheClock
from tests.support.harness import HISTORIES, recorded_history
from treadle import sandbox
from treadle.connection import data_converter
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import LeanSandboxedWorkflowRunner, workflow_runner

# A run with a model call, tool calls and a write: every kind of payload sequence a step has.
HISTORY = HISTORIES / "test_happy_path_writes_a_file_and_answers-0.json"


class RecordingCodec(PayloadCodec, WithSerializationContext):
    """Passes payloads through unchanged; writes down the context of every sequence."""

    def __init__(self, seen: list[str], context: SerializationContext | None = None) -> None:
        self.seen = seen
        self.context = context

    def with_context(self, context: SerializationContext) -> RecordingCodec:
        return RecordingCodec(self.seen, context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(f"encode {self.context!r}")
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(f"decode {self.context!r}")
        return list(payloads)


async def contexts_seen(runner: Any, path: Path = HISTORY) -> list[str]:
    seen: list[str] = []
    converter = dataclasses.replace(data_converter(os.environ), payload_codec=RecordingCodec(seen))
    replayer = Replayer(workflows=WORKFLOWS, data_converter=converter, workflow_runner=runner)
    result = await replayer.replay_workflow(recorded_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    return seen


def sdk_runner_as_shipped() -> SandboxedWorkflowRunner:
    """The SDK's own runner with the restrictions every worker ships with."""
    return SandboxedWorkflowRunner(restrictions=workflow_runner().restrictions)


def count_sandbox_entries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each time code is executed inside a run's sandbox (the SDK's ``_run_code``)."""
    entered: list[str] = []
    original = sdk_runner._Instance._run_code

    def counted(self: Any, code: str, **extra: Any) -> None:
        entered.append(code)
        original(self, code, **extra)

    monkeypatch.setattr(sdk_runner._Instance, "_run_code", counted)
    return entered


async def test_workers_and_replayers_run_the_lean_sandbox() -> None:
    assert isinstance(workflow_runner(), LeanSandboxedWorkflowRunner)


async def test_a_runs_payload_contexts_are_the_sdks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    entered = count_sandbox_entries(monkeypatch)
    shipped = await contexts_seen(sdk_runner_as_shipped())
    sdk_entries = len(entered)
    entered.clear()
    lean = await contexts_seen(workflow_runner())
    # The same contexts, in the same order, activities' own among them.
    assert lean == shipped
    assert any(ActivitySerializationContext.__name__ in seen for seen in lean)
    # The SDK's runner entered the sandbox for each payload sequence; the lean one only to
    # create the run and for its activations.
    assert all("serialization_context" not in code for code in entered)
    assert all("external_store_context" not in code for code in entered)
    assert len(entered) < sdk_entries / 2


async def test_an_sdk_without_the_expected_shape_gets_its_own_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped = await contexts_seen(sdk_runner_as_shipped())
    entered = count_sandbox_entries(monkeypatch)
    monkeypatch.setattr(sandbox, "_IN_SANDBOX", "__not_in_this_sdk")
    assert await contexts_seen(workflow_runner()) == shipped
    assert any("serialization_context" in code for code in entered)


async def test_workflow_code_still_runs_sandboxed(client: Client) -> None:
    """A workflow reading the wall clock fails its task under the lean runner, as under the
    SDK's (here the task's failure is made the workflow's, so the test sees it end)."""
    task_queue = f"sandbox-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ReadsTheClock],
        workflow_runner=workflow_runner(),
        workflow_failure_exception_types=[Exception],
    ):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                ReadsTheClock.run, id=f"clock-{uuid.uuid4()}", task_queue=task_queue
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == "RestrictedWorkflowAccessError", cause
