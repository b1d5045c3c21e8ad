"""A call that names no output limit gets its endpoint's default: lower for a server on this
machine, where a small model looping at 4,096 tokens spent the whole call timeout each attempt."""

from __future__ import annotations

import pytest

from tests.support.harness import Harness
from treadle.activities.model.output_cap import (
    DEFAULT_MAX_TOKENS,
    LOCAL_MAX_TOKENS,
    default_max_tokens,
)
from treadle.workflows.agent.messages.models import AgentResult


@pytest.mark.parametrize(
    ("provider", "base_url", "local"),
    [
        ("openai", "https://api.openai.com/v1", False),
        ("openrouter", "https://openrouter.ai/api/v1", False),
        ("openai", "http://127.0.0.1:8765/v1", True),
        ("openai", "http://127.3.4.5/v1", True),
        ("openai", "http://[::1]:8080/v1", True),
        ("vllm", "http://localhost:8000/v1", True),
        ("vllm", "http://gpu-box.internal:8000/v1", False),
        ("ollama", "http://gpu-box.internal:11434/v1", True),
        ("llamacpp", "http://10.0.0.7:8080/v1", True),
        ("anthropic", "https://api.anthropic.com/v1", False),
    ],
)
def test_local_endpoints_get_the_local_default(provider: str, base_url: str, local: bool) -> None:
    """Loopback base URLs and the desktop servers' providers are local; hosted APIs are not."""
    expected = LOCAL_MAX_TOKENS if local else DEFAULT_MAX_TOKENS
    assert default_max_tokens(provider, base_url) == expected
    assert LOCAL_MAX_TOKENS < DEFAULT_MAX_TOKENS


async def test_a_run_on_a_local_server_sends_the_local_cap_unless_it_sets_its_own(
    harness: Harness,
) -> None:
    """The scripted server listens on loopback: a run without max_tokens sends the local cap,
    one with max_tokens sends its own."""
    default = harness.script({"content": "ok"})
    result: AgentResult = await (await harness.start(default, tools=[])).result()
    assert result.answer == "ok"
    (body,) = harness.requests(default)
    assert body["max_tokens"] == LOCAL_MAX_TOKENS
    own = harness.script({"content": "ok"})
    await (await harness.start(own, tools=[], max_tokens=3_000)).result()
    (body,) = harness.requests(own)
    assert body["max_tokens"] == 3_000
