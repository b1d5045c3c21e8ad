"""The model providers Treadle knows: which wire protocol, where, which key, which default model.

Pure data, so both sides can use it: the workflow validates and resolves ``provider:model``
strings (including per-task-type selection), and the model activity reads each provider's base
URL and key from the worker's environment by the names given here.

Beside the built-in table, a process may name its own providers (``register``; what
``TreadlePlugin(providers=...)`` does when it is made, in the worker and in the client that
starts runs). Where a provider name is checked, it is checked against both: a client that
builds an ``AgentInput`` (refused before the run starts), the workflow that decodes it (a
worker without the provider fails the run with the same message, it never guesses), and the
model activity (which reads its endpoint and key). The registry is written only while a
process sets itself up, before its worker runs, and is then read-only: workflow code reads it
as it reads the built-in table (``treadle.workflows`` is passed through the sandbox, so the
sandbox sees the same registry).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Protocol = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ProviderSpec:
    """One model provider: a name for ``provider:model`` strings, the wire protocol it speaks,
    where it is and which variables of the worker's environment hold its base URL and key."""

    name: str
    protocol: Protocol
    default_base_url: str
    base_url_env: str = ""
    """The variable that overrides the base URL; empty: ``NAME_BASE_URL``."""
    key_env: str | None = None
    """Where the worker finds the key; ``None`` for servers that take none."""
    key_required: bool = False
    """At the default base URL; a custom base URL (a proxy, a local server) may take none."""
    default_model: str | None = None
    """Used for ``provider`` or ``provider:`` with no model name; ``None``: a name is needed."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"provider name {self.name!r} does not match {_NAME.pattern}")
        if self.protocol not in ("openai", "anthropic"):
            raise ValueError(
                f"provider {self.name!r}: protocol {self.protocol!r} is not openai or anthropic"
            )
        if not self.base_url_env:
            env = f"{self.name.upper().replace('-', '_')}_BASE_URL"
            object.__setattr__(self, "base_url_env", env)


_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


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


_REGISTERED: dict[str, ProviderSpec] = {}
"""The providers this process named beside the built-in ones (``register``)."""


def register(specs: Iterable[ProviderSpec]) -> None:
    """Name providers beside the built-in ones, for every model string this process checks.

    The same provider registered again is nothing new; a built-in name, or a name already
    registered for another provider, is a ``ValueError`` and nothing of the batch is added."""
    batch: dict[str, ProviderSpec] = {}
    for spec in specs:
        if spec.name in PROVIDERS:
            raise ValueError(f"model provider {spec.name!r} is built in: name yours otherwise")
        taken = _REGISTERED.get(spec.name) or batch.get(spec.name)
        if taken is not None and taken != spec:
            raise ValueError(f"model provider {spec.name!r} is named twice, differently")
        batch[spec.name] = spec
    _REGISTERED.update(batch)


def known() -> Mapping[str, ProviderSpec]:
    """Every provider a model string may name here: the built-in ones, then the registered."""
    return MappingProxyType({**PROVIDERS, **_REGISTERED})


class ModelStringError(ValueError):
    """A model string that names no known provider or no model."""


def resolve(model: str) -> tuple[ProviderSpec, str]:
    """``provider:model`` -> (provider, model name), filling in the provider's default model."""
    provider, _, name = model.partition(":")
    spec = PROVIDERS.get(provider) or _REGISTERED.get(provider)
    if spec is None:
        names = ", ".join(sorted([*PROVIDERS, *_REGISTERED]))
        raise ModelStringError(f"unknown model provider {provider!r} in {model!r} (known: {names})")
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
