"""``JobLedgerWorkflow``: one job's run history and health, for as long as the job exists.

Why a workflow: a running workflow is durable (its state survives worker restarts by replay) and
is not subject to the namespace's retention, which deletes *closed* runs after a few days. So the
ledger outlives every ``JobWorkflow`` it records. Records arrive by update-with-start from the
``record_job_run`` activity (an update rather than a signal: when the activity returns, the
record is in the ledger, so a run that has finished is already in `jobs history`); operators
read them by query, or without a worker from the ``summary`` memo; ``job-history-cleanup``
prunes them by update.
"""

from __future__ import annotations

from pydantic import ValidationError
from temporalio import workflow

from treadle.workflows.jobs.models import (
    HistoryRequest,
    JobHistory,
    JobRun,
    JobSummary,
    LedgerState,
    PruneRequest,
    PruneResult,
)

SUMMARY_MEMO = "summary"
"""Memo key holding the ledger's ``JobSummary``: ``jobs list`` reads it with a describe call,
which works while no worker runs (a query would wait for one)."""


@workflow.defn(failure_exception_types=[ValidationError])
class JobLedgerWorkflow:
    """A job's run records and health; continues-as-new with its state before history grows."""

    @workflow.init
    def __init__(self, state: LedgerState) -> None:
        self._state = state
        self._messages = 0

    @workflow.run
    async def run(self, state: LedgerState) -> None:
        # Continue-as-new carries the memo over (it already holds this state's summary); a
        # ledger's first run has none yet. Publishing at every start covers both, and is cheap.
        self._publish()
        await workflow.wait_condition(
            lambda: (
                self._messages >= self._state.messages_per_run
                or workflow.info().is_continue_as_new_suggested()
            )
        )
        # Records and prunes accepted in this workflow task must be applied before the state
        # is handed to the next run; updates arriving later are delivered to the next run.
        await workflow.wait_condition(workflow.all_handlers_finished)
        # A ledger lives as long as its job: its next run starts on the Worker Deployment's
        # current build, so an old build drains (docs/upgrades.md; unversioned: ignored).
        workflow.continue_as_new(
            self._state,
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    @workflow.update
    def record(self, run: JobRun) -> JobSummary:
        """Add a run, or replace its running record with the final one (duplicates ignored)."""
        self._messages += 1
        if self._state.apply(run):
            self._publish()
        return self._state.summary()

    @record.validator
    def _check_record(self, run: JobRun) -> None:
        # Rejected before it reaches the history: a record meant for another job's ledger.
        if run.job_id != self._state.job_id:
            raise ValueError(
                f"a run of job {run.job_id!r} sent to the ledger of {self._state.job_id!r}"
            )

    @workflow.update
    def prune(self, request: PruneRequest) -> PruneResult:
        """Remove runs that ended before ``request.before``."""
        self._messages += 1
        result = self._state.prune(request)
        if result.removed:
            self._publish()
        return result

    @workflow.query
    def history(self, request: HistoryRequest) -> JobHistory:
        return self._state.history(request)

    @workflow.query
    def summary(self) -> JobSummary:
        return self._state.summary()

    def _publish(self) -> None:
        workflow.upsert_memo({SUMMARY_MEMO: self._state.summary()})
