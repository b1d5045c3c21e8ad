"""Search attributes the agent workflow keeps up to date, so runs are findable by state.

They must be registered on the namespace (``temporal-dev.yaml`` does it for the dev server;
``treadle worker`` checks at start-up), otherwise upserting them fails the workflow task.

Every upsert is a billed Temporal Cloud action; the values a run is started with are not
(https://docs.temporal.io/cloud/actions). So the clients that start runs give them what the
run shows first (``start_attributes``), and the run sends only what visibility does not show
yet (``publishing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)

from treadle.workflows.agent.messages.config import AgentInput
from treadle.workflows.agent.messages.providers import select
from treadle.workflows.agent.messages.state_machine import State

AGENT_STATE = SearchAttributeKey.for_keyword("AgentState")
AGENT_STEP = SearchAttributeKey.for_int("AgentStep")
AGENT_MODEL = SearchAttributeKey.for_keyword("AgentModel")
FORKED_FROM = SearchAttributeKey.for_keyword("ForkedFrom")
"""A fork's origin, ``ID@STEP`` (set when ``treadle fork`` starts it): ``ForkedFrom STARTS_WITH
"ID@"`` finds every fork of ID."""

REQUIRED: Mapping[str, SearchAttributeIndexedValueType] = MappingProxyType(
    {
        AGENT_STATE.name: SearchAttributeIndexedValueType.KEYWORD,
        AGENT_STEP.name: SearchAttributeIndexedValueType.INT,
        AGENT_MODEL.name: SearchAttributeIndexedValueType.KEYWORD,
        FORKED_FROM.name: SearchAttributeIndexedValueType.KEYWORD,
    }
)
"""Name -> type of every search attribute the workflows upsert."""


def start_attributes(
    input: AgentInput, also: TypedSearchAttributes | None = None
) -> TypedSearchAttributes | None:
    """What a fresh run of ``input`` shows as it starts (``Planning``, step 0, its model) and
    ``also``, for ``start_workflow(search_attributes=...)`` / ``start_child_workflow``: a run
    started with them sends no upsert to show them. ``also`` alone for a run that sets none
    (``config.search_attributes`` off) or resumes one (a fork, ``treadle import``)."""
    pairs = list(also or ())
    if input.config.search_attributes and input.resume is None:
        model = select(input.config.models, input.task_type, input.model)
        pairs += [
            SearchAttributePair(AGENT_STATE, State.PLANNING.value),
            SearchAttributePair(AGENT_STEP, 0),
            SearchAttributePair(AGENT_MODEL, model),
        ]
    return TypedSearchAttributes(pairs) if pairs else None
