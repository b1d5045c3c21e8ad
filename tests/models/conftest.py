"""The model endpoint: the model activity over both wire protocols, streaming, odd and non-
Unicode replies, provider settings, the scripted model server, and a real provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from treadle.activities.model.activity import http_client


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP client the worker gives the model activity."""
    async with http_client() as client:
        yield client
