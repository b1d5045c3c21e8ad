"""The output limit a call sends when neither the run's ``max_tokens`` nor its budget sets one.

Every call names a limit, so a model that never stops is cut by its server, not by the
activity's timeout on every attempt. A hosted model writes 4,096 tokens in well under a minute;
a local one on a CPU (Ollama, llama.cpp, LM Studio, anything on this machine) makes 10-50 a
second, so at 4,096 a small model caught in a loop spent the whole 300 s call timeout, five
attempts running, before its run ended. Local endpoints get ``LOCAL_MAX_TOKENS``: a looping reply
is cut in a minute or two and the run ends at once saying which limit to raise
(``max_tokens``), which a run that needs longer replies sets.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from treadle.activities.model.payload import DEFAULT_MAX_TOKENS

__all__ = ["DEFAULT_MAX_TOKENS", "LOCAL_MAX_TOKENS", "LOCAL_PROVIDERS", "default_max_tokens"]

LOCAL_MAX_TOKENS = 1_024
"""A local endpoint's default output limit: about a page of text or a 100-line file."""
LOCAL_PROVIDERS = frozenset({"ollama", "llamacpp", "lmstudio"})
"""Providers that are servers on the user's own machine, wherever their base URL points."""


def is_local(provider: str, base_url: str) -> bool:
    """``provider`` serves from this machine: a local kind, or a base URL on loopback."""
    if provider in LOCAL_PROVIDERS:
        return True
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_max_tokens(provider: str, base_url: str) -> int:
    """The output limit of a call to ``provider`` at ``base_url`` that names none."""
    return LOCAL_MAX_TOKENS if is_local(provider, base_url) else DEFAULT_MAX_TOKENS
