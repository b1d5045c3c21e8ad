"""``AgentWorkflow``: the agent loop as a deterministic Temporal workflow.

The loop itself is ``engine.AgentEngine``; this module only declares it a workflow. It is
passed through the sandbox like the engine (``worker.PASSTHROUGH_MODULES``): loaded once per
worker, not imported again for every run it caches or replays (a parked run costs its state,
not a copy of the code).
"""

from __future__ import annotations

from pydantic import ValidationError
from temporalio import workflow

from treadle.workflows.agent.engine import SIGNALS, WAITING_STATES, AgentEngine
from treadle.workflows.agent.messages.models import AgentInput, AgentResult

__all__ = ["SIGNALS", "WAITING_STATES", "AgentWorkflow"]


# A ValidationError in workflow code means bad data (an input another client built without our
# models, a corrupt body): fail the run with the message instead of retrying its task forever.
@workflow.defn(failure_exception_types=[ValidationError])
class AgentWorkflow(AgentEngine):
    """One durable agent run: plan, act, observe until the model answers."""

    @workflow.init
    def __init__(self, input: AgentInput) -> None:
        super().__init__(input)

    @workflow.run
    async def run(self, input: AgentInput) -> AgentResult:
        return await self.drive(input)
