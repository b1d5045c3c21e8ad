"""Search attributes the agent workflow keeps up to date, so runs are findable by state.

They must be registered on the namespace (``temporal-dev.yaml`` does it for the dev server;
``treadle worker`` checks at start-up), otherwise upserting them fails the workflow task.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

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
