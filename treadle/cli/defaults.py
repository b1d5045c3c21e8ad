"""The model a command's new run gets when none is named: the demo's scripted model on the
demo's task queue, else ``openai:gpt-4o``.

``treadle demo --keep`` serves ``treadle-demo`` with a worker whose only model is the scripted
``openai:demo``: a run started there with a real model's name would reach the scripted server
and fail, and one started without ``--task-queue`` would wait on the shared queue for a worker
with a key. So ``run``, ``chat``, ``import``, ``ui`` and ``api`` on the demo's queue default to
the demo's model, and everywhere else to the one the workflow's own input defaults to.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MODEL", "DEMO_MODEL", "DEMO_TASK_QUEUE", "model_for"]

DEFAULT_MODEL = "openai:gpt-4o"
"""A new run's model unless told another (``AgentInput.model``'s default too)."""
DEMO_MODEL = "openai:demo"
"""The scripted model's name, for the demo's run and for yours while ``--keep`` is up."""
DEMO_TASK_QUEUE = "treadle-demo"
"""The queue ``demo --keep`` serves when ``--task-queue`` is left at the shared default."""


def model_for(task_queue: str, given: str | None) -> str:
    """``given``, else the model a new run on ``task_queue`` gets."""
    if given:
        return given
    return DEMO_MODEL if task_queue == DEMO_TASK_QUEUE else DEFAULT_MODEL
