"""The tool schemas a model request names by store key, read back for the provider.

The MCP listing stores each distinct input schema once (``treadle.activities.mcp.schemas``) and the
workflow sends its key (``ToolSchema.parameters_ref``); here, before the protocol module builds
the provider's tool list, each key becomes its schema again. A worker reads the same few
schemas on every call, so it keeps the latest ``CACHED_SCHEMAS`` of them parsed in memory.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from treadle.activities.errors import ModelConfigError
from treadle.activities.store.blobs import BlobCorrupt
from treadle.activities.store.conversation import ConversationStore
from treadle.workflows.agent.messages.models import ModelRequest, ToolSchema

CACHED_SCHEMAS = 256
"""Schemas a worker keeps parsed (least recently used are dropped); each is at most
``MAX_SCHEMA_BYTES`` (64 KiB), so the cache holds at most 16 MiB of schemas, and usually the
few kilobytes of the servers' handful of tools."""


class ToolSchemas:
    """Reads referenced tool schemas from the worker's store, with a small cache."""

    def __init__(self, store: ConversationStore | None, cached: int = CACHED_SCHEMAS) -> None:
        self._store = store
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._cached = cached

    async def inline(self, request: ModelRequest) -> ModelRequest:
        """``request`` with every tool schema it names by key read back into place."""
        if all(schema.parameters_ref is None for schema in request.tool_schemas):
            return request
        schemas = tuple([await self._inline(schema) for schema in request.tool_schemas])
        return request.model_copy(update={"tool_schemas": schemas})

    async def _inline(self, schema: ToolSchema) -> ToolSchema:
        key = schema.parameters_ref
        if key is None:
            return schema
        parameters = await self.read(key)
        return ToolSchema(name=schema.name, description=schema.description, parameters=parameters)

    async def read(self, key: str) -> dict[str, Any]:
        """The schema stored under ``key`` (``BlobMissing``/``BlobCorrupt`` as the store says)."""
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        if self._store is None:
            raise ModelConfigError(
                "the run offers tools whose schemas are in a store, but this worker keeps none "
                "(start it with --store, the same store as the worker that listed them)"
            )
        try:
            parameters = json.loads(await self._store.get_text(key))
        except (ValueError, RecursionError) as exc:
            raise BlobCorrupt(f"tool schema {key} is not JSON: {exc}") from None
        if not isinstance(parameters, dict):
            raise BlobCorrupt(f"tool schema {key} is not a JSON object")
        self._cache[key] = parameters
        while len(self._cache) > self._cached:
            self._cache.popitem(last=False)
        return parameters
