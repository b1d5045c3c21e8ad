"""A test-only agent with one planted bug, in a module of its own so the sandbox can load it."""

from __future__ import annotations

from temporalio import workflow

from treadle.workflows.agent.messages.models import AgentInput, AgentResult
from treadle.workflows.agent.messages.state_machine import Event
from treadle.workflows.agent.workflow import AgentWorkflow


@workflow.defn(name="MisbehavingAgent", failure_exception_types=[])
class MisbehavingAgent(AgentWorkflow):
    """The real agent, except that its post-tools hook returns an undeclared event."""

    @workflow.run
    async def run(self, input: AgentInput) -> AgentResult:
        return await super().run(input)

    async def _post_tools_hook(self) -> Event:
        return Event.CONTINUE
