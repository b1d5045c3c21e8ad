"""Token counts for a reply whose provider reported none.

llama.cpp's server sends no usage in a stream and ignores ``stream_options``; a budget that
reads zero never stops a run. When a reply's usage is all zero, the worker estimates it from
what was sent and received, at ``CHARS_PER_TOKEN`` characters a token (the usual figure for
English text and code with BPE tokenizers; no tokenizer ships with the worker, since loading one
would mean downloading its vocabulary at run time), and marks the counts ``estimated_tokens``
so status, trace and metrics can say so.
"""

from __future__ import annotations

import json
import math

from treadle.activities.model.payload import offered_schemas
from treadle.workflows.agent.messages.models import ModelRequest, ModelResponse, TokenUsage

__all__ = ["CHARS_PER_TOKEN", "MESSAGE_OVERHEAD", "estimate_tokens", "with_usage"]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (role markers and separators)."""


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _prompt_tokens(request: ModelRequest) -> int:
    total = 0
    for message in request.messages:
        total += MESSAGE_OVERHEAD + estimate_tokens(message.content or "")
        for call in message.tool_calls:
            total += estimate_tokens(call.name) + estimate_tokens(call.arguments)
    for name, description, schema in offered_schemas(request):
        total += estimate_tokens(name + description + json.dumps(schema))
    return total


def _completion_tokens(response: ModelResponse) -> int:
    total = estimate_tokens(response.content or "")
    for call in response.tool_calls:
        total += estimate_tokens(call.name) + estimate_tokens(call.arguments)
    return total


def with_usage(request: ModelRequest, response: ModelResponse) -> ModelResponse:
    """``response`` as it is when its provider counted its tokens; else with an estimate."""
    usage = response.usage
    if usage.prompt_tokens or usage.completion_tokens or usage.total_tokens:
        return response
    prompt, completion = _prompt_tokens(request), _completion_tokens(response)
    estimate = TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        estimated_tokens=prompt + completion,
    )
    return response.model_copy(update={"usage": estimate})
