"""The contract for clients in any language (``treadle.contract``, ``schemas/``): the committed
schemas are today's models', every example fits its schema and its model, and the stock
``temporal`` CLI starts and decides a run with the examples as they are, against the real dev
server, a real worker and the scripted model (the demo's script, ``openai:demo``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.harness import Harness

DEMO_SCRIPT = Path(__file__).resolve().parents[2] / "treadle" / "demo_script.json"


@pytest.fixture
def demo_model(harness: Harness) -> str:
    """The demo's scripted model, ``openai:demo`` as the examples name it, on the harness's
    model server (the script picks a turn by the conversation, so sharing it is safe)."""
    script = json.loads(DEMO_SCRIPT.read_text())
    harness.models.add_model("demo", script["models"]["demo"])
    return "openai:demo"
