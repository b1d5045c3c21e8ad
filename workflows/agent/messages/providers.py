"""The model providers Treadle knows: which wire protocol, where, which key, which default model.

Pure data, so both sides can use it: the workflow validates and resolves ``provider:model``
strings (including per-task-type selection), and the model activity reads each provider's base
URL and key from the worker's environment by the names given here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Protocol = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    protocol: Protocol
    default_base_url: str
    base_url_env: str
    key_env: str | None
    """Where the worker finds the key; ``None`` for servers that take none."""
    key_required: bool
    """At the default base URL; a custom base URL (a proxy, a local server) may take none."""
    default_model: str | None
    """Used for ``provider`` or ``provider:`` with no model name; ``None``: a name is needed."""


PROVIDERS: Mapping[str, ProviderSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            ProviderSpec(
                "openai", "openai", "https://api.openai.com/v1", "OPENAI_BASE_URL",
                "OPENAI_API_KEY", True, "gpt-4o-mini",
            ),
            ProviderSpec(
                "anthropic", "anthropic", "https://api.anthropic.com/v1", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_API_KEY", True, "claude-sonnet-4-5",
            ),
            ProviderSpec(
                "ollama", "openai", "http://localhost:11434/v1", "OLLAMA_BASE_URL",
                None, False, "llama3.2",
            ),
            ProviderSpec(
                "openrouter", "openai", "https://openrouter.ai/api/v1", "OPENROUTER_BASE_URL",
                "OPENROUTER_API_KEY", True, None,
            ),
            ProviderSpec(
                "vllm", "openai", "http://localhost:8000/v1", "VLLM_BASE_URL",
                "VLLM_API_KEY", False, None,
            ),
            ProviderSpec(
                "llamacpp", "openai", "http://localhost:8080/v1", "LLAMACPP_BASE_URL",
                None, False, None,
            ),
            ProviderSpec(
                "lmstudio", "openai", "http://localhost:1234/v1", "LMSTUDIO_BASE_URL",
                None, False, None,
            ),
        )
    }
)  # fmt: skip


class ModelStringError(ValueError):
    """A model string that names no known provider or no model."""


def resolve(model: str) -> tuple[ProviderSpec, str]:
    """``provider:model`` -> (provider, model name), filling in the provider's default model."""
    provider, _, name = model.partition(":")
    spec = PROVIDERS.get(provider)
    if spec is None:
        known = ", ".join(sorted(PROVIDERS))
        raise ModelStringError(f"unknown model provider {provider!r} in {model!r} (known: {known})")
    if not name:
        if spec.default_model is None:
            raise ModelStringError(f"{provider} has no default model; write '{provider}:MODEL'")
        name = spec.default_model
    return spec, name


def select(models: Mapping[str, str], task_type: str, fallback: str) -> str:
    """agentsm's model selection: ``models[task_type]``, then ``models["default"]``, then the
    run's own model string (which may be just ``provider`` for the provider's default)."""
    chosen = models.get(task_type) or models.get("default") or fallback
    spec, name = resolve(chosen)
    return f"{spec.name}:{name}"
