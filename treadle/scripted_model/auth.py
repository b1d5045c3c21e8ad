"""Who may call: the API key a request carries, and the 401 each protocol answers a request
without the server's key. Neither ever echoes the key back (a scripted ``echo_key`` error is
the only way one comes back, on purpose)."""

from __future__ import annotations

from collections.abc import Mapping

from treadle.scripted_model import anthropic_messages, openai_chat
from treadle.scripted_model.replies import Api, Reply


def _bearer(headers: Mapping[str, str]) -> tuple[str, str]:
    """The ``Authorization`` header's scheme (lower-cased) and token."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower(), token.strip()


def request_key(api: Api, headers: Mapping[str, str]) -> str:
    """The API key a request carried: Anthropic's ``x-api-key``, else the bearer token."""
    if api == "anthropic":
        return headers.get("x-api-key", "").strip()
    scheme, token = _bearer(headers)
    return token if scheme == "bearer" else ""


def openai_denial(api_key: str | None, headers: Mapping[str, str]) -> Reply | None:
    """OpenAI's 401 when the server wants ``api_key`` and the bearer token is not it."""
    if api_key is None:
        return None
    scheme, token = _bearer(headers)
    if scheme == "bearer" and token == api_key:
        return None
    if not token:
        message = "You didn't provide an API key. Provide it in the Authorization header."
    else:
        message = "Incorrect API key provided."
    return openai_chat.error_reply(401, message, code="invalid_api_key")


def anthropic_denial(api_key: str | None, headers: Mapping[str, str]) -> Reply | None:
    """Anthropic's 401 when the server wants ``api_key`` and ``x-api-key`` is not it."""
    if api_key is None or request_key("anthropic", headers) == api_key:
        return None
    return anthropic_messages.error_reply(401, "invalid x-api-key")
