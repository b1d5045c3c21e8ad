"""What a real server rejects in a request, checked before a turn is played: each protocol's
400 for a body it cannot take, in its own words.

Tests rely on these being as strict as the real APIs: a conversation Anthropic would refuse
(a ``tool_use`` not answered by a ``tool_result`` right after) is refused here too.
"""

from __future__ import annotations

import re
from typing import Any

from treadle.scripted_model import anthropic_messages, openai_chat
from treadle.scripted_model.replies import Reply


def openai_request_problem(body: Any) -> Reply | None:
    """The 400 OpenAI answers a chat completion request it cannot take, or None."""
    if not isinstance(body, dict):
        return openai_chat.error_reply(
            400,
            "We could not parse the JSON body of your request. The body must be a JSON object.",
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return openai_chat.error_reply(400, "you must provide a model parameter", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return openai_chat.error_reply(
            400,
            "Missing required parameter: 'messages'.",
            code="missing_required_parameter",
            param="messages",
        )
    if body.get("stream_options") is not None and body.get("stream") is not True:
        return openai_chat.error_reply(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    return _tool_choice_problem(body) or _response_format_problem(body.get("response_format"))


def _tool_choice_problem(body: dict[str, Any]) -> Reply | None:
    """OpenAI's 400s for a ``tool_choice`` it cannot follow."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    tools = body.get("tools") or []
    if not tools:
        return openai_chat.error_reply(
            400,
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            param="tool_choice",
        )
    if isinstance(choice, str):
        if choice in ("none", "auto", "required"):
            return None
        return openai_chat.error_reply(
            400,
            f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
            param="tool_choice",
        )
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    names = {t.get("function", {}).get("name") for t in tools if isinstance(t, dict)}
    if name not in names:
        return openai_chat.error_reply(
            400,
            f"Invalid value for 'tool_choice': no function named {name!r} in 'tools'.",
            param="tool_choice",
        )
    return None


def _response_format_problem(value: Any) -> Reply | None:
    """OpenAI's 400s for a ``response_format`` it cannot take (structured output)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("text", "json_object"):
        return None
    if kind != "json_schema":
        return openai_chat.error_reply(
            400,
            f"Invalid value: {kind!r}. Supported values are: 'json_object', 'json_schema', "
            "and 'text'.",
            param="response_format.type",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        return openai_chat.error_reply(
            400,
            "Missing required parameter: 'response_format.json_schema'.",
            code="missing_required_parameter",
            param="response_format.json_schema",
        )
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        return openai_chat.error_reply(
            400,
            "Missing required parameter: 'response_format.json_schema.name'.",
            code="missing_required_parameter",
            param="response_format.json_schema.name",
        )
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, dict):
        return openai_chat.error_reply(
            400,
            "Invalid type for 'response_format.json_schema.schema': expected an object.",
            param="response_format.json_schema.schema",
        )
    if isinstance(schema, dict) and schema.get("type") != "object":
        return openai_chat.error_reply(
            400,
            "Invalid schema for response_format 'final_answer': schema must be a JSON Schema "
            "of 'type: \"object\"'.",
            param="response_format",
        )
    return None


def forces_tool(protocol: str, body: dict[str, Any]) -> bool:
    """The request requires a tool call (OpenAI ``required`` or a named function; Anthropic
    ``any`` or ``tool``): a real model then never answers with text alone."""
    choice = body.get("tool_choice")
    if protocol == "anthropic":
        return isinstance(choice, dict) and choice.get("type") in ("any", "tool")
    return choice == "required" or isinstance(choice, dict)


def forced_tool_refusal(protocol: str, index: int) -> Reply:
    """What the server says when the script answers a request that forces a tool call with
    text alone: the script is wrong (no real model could do it), said as a 500."""
    message = (
        f"scripted turn {index} answers with text alone, but the request forces a tool call "
        "(tool_choice): script a tool call for it"
    )
    if protocol == "anthropic":
        return anthropic_messages.error_reply(500, message)
    return openai_chat.error_reply(500, message)


def anthropic_request_problem(headers: dict[str, str], body: Any) -> Reply | None:
    """The 400 Anthropic answers a messages request it cannot take, or None."""
    if "anthropic-version" not in headers:
        return anthropic_messages.error_reply(400, "anthropic-version: header is required")
    if not isinstance(body, dict):
        return anthropic_messages.error_reply(400, "The request body is not a valid JSON object.")
    if (problem := _anthropic_body_problem(body)) is not None:
        return anthropic_messages.error_reply(400, problem)
    return None


def _anthropic_body_problem(body: dict[str, Any]) -> str | None:
    """What the Messages API would reject in this request, as its error message, or None."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "model: Field required"
    if "max_tokens" not in body:
        return "max_tokens: Field required"
    max_tokens = body["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Input should be a positive integer"
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not _text_blocks(system):
        return "system: Input should be a string or a list of text blocks"
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 1
    ):
        return "temperature: Input should be a number between 0 and 1"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a list"
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return f"tools.{i}.name: Field required"
            # Server tools (web search, ...) carry a "type" and no schema; custom tools need one.
            if tool.get("type", "custom") == "custom" and not isinstance(
                tool.get("input_schema"), dict
            ):
                return f"tools.{i}.input_schema: Field required"
    choice = body.get("tool_choice")
    if choice is not None:
        if not tools:
            return "tool_choice: tool_choice may only be specified while providing tools."
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            return (
                "tool_choice: Input tag does not match any of the expected tags: 'auto', "
                "'any', 'tool', 'none'"
            )
        names = {t.get("name") for t in tools if isinstance(t, dict)}
        if kind == "tool" and choice.get("name") not in names:
            return f"tool_choice.name: no tool named {choice.get('name')!r} in tools"
    if "messages" not in body:
        return "messages: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return _conversation_problem(messages)


def _conversation_problem(messages: list[Any]) -> str | None:
    """Roles and content shapes, and tool_use blocks answered by tool_result blocks right after."""
    pending: list[str] = []  # tool_use ids of the previous (assistant) message
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be an object"
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if isinstance(content, str):
            blocks: list[dict[str, Any]] = []
        elif isinstance(content, list) and all(
            isinstance(block, dict) and isinstance(block.get("type"), str) for block in content
        ):
            blocks = content
        else:
            return f"messages.{i}.content: Input should be a string or a list of content blocks"
        results = [b.get("tool_use_id") for b in blocks if b["type"] == "tool_result"]
        for j, block in enumerate(blocks):
            if block["type"] == "tool_result" and block.get("tool_use_id") not in pending:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
        if missing := [id_ for id_ in pending if id_ not in results]:
            return (
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        pending = [
            str(block.get("id"))
            for block in blocks
            if role == "assistant" and block["type"] == "tool_use"
        ]
    return None


def _text_blocks(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        for block in value
    )
