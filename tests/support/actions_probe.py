"""A workflow that does one of each thing Temporal Cloud bills, so ``bench.actions``'s count of a
history can be checked against what the history must hold: an activity that fails twice before
it succeeds, a timer, a signal, a search-attribute upsert, a ``workflow.patched`` (its marker,
and its ``TemporalChangeVersion`` upsert that Cloud does not bill), a child workflow with an
activity of its own, a continue-as-new, and a local activity in the run it continued as."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.search_attributes import AGENT_STATE

FAILED_ATTEMPTS = 2
"""Attempts of ``flaky`` that fail before the one that succeeds."""
QUICK_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=50), backoff_coefficient=1)


@activity.defn
async def flaky() -> int:
    """Fails its first ``FAILED_ATTEMPTS`` attempts (each retried by the server, no event each)."""
    attempt = activity.info().attempt
    if attempt <= FAILED_ATTEMPTS:
        raise ApplicationError(f"attempt {attempt} fails on purpose")
    return attempt


@activity.defn
async def once() -> str:
    return "done"


@workflow.defn
class ActionsProbeChild:
    """One activity, once."""

    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(once, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn
class ActionsProbeWorkflow:
    """First run: patch, flaky activity, timer, upsert, child, a signal awaited, continue-as-new.
    Second run: one local activity."""

    def __init__(self) -> None:
        self._go = False

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.run
    async def run(self, first: bool) -> int:
        if not first:
            await workflow.execute_local_activity(
                once, start_to_close_timeout=timedelta(seconds=30)
            )
            return 0
        workflow.patched("actions-probe")
        attempt = await workflow.execute_activity(
            flaky, start_to_close_timeout=timedelta(seconds=30), retry_policy=QUICK_RETRY
        )
        await workflow.sleep(timedelta(milliseconds=10))
        workflow.upsert_search_attributes([AGENT_STATE.value_set("Probing")])
        await workflow.execute_child_workflow(
            ActionsProbeChild.run, id=f"{workflow.info().workflow_id}-child"
        )
        await workflow.wait_condition(lambda: self._go)
        workflow.continue_as_new(False)
        return attempt  # never reached: continue_as_new raises
