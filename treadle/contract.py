"""The contract for clients in any language: JSON Schemas of ``AgentWorkflow``'s input and
result and of each signal, update and query a client uses, generated from the models the
workflow itself validates with (``treadle schemas --out schemas``; ``schemas/`` in the
repository holds them, and a test holds them to the models).

Each door is named by object (``AgentWorkflow.approve``); its Temporal name is the one the
workflow's definition gives it, so a renamed handler renames its files. Every handler of the
workflow is a door here or listed in ``INTERNAL`` with its reason (a test checks it), so a new
one cannot be left out of the contract by forgetting it.

Schemas are the models' *validation* schemas: what the workflow accepts as input and, for what
it answers, how a reader parses it (fields at their default may be left out of an answer).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter
from temporalio import workflow

from treadle.workflows.agent.messages.decisions import (
    ApproveSignal,
    Decision,
    GuideSignal,
    ModifySignal,
    PendingApproval,
    RejectSignal,
)
from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.models import (
    AgentInput,
    AgentResult,
    AgentStatus,
    SendReceipt,
    ThreadExport,
    Trace,
    UserMessage,
)
from treadle.workflows.agent.messages.progress import ProgressSummary
from treadle.workflows.agent.messages.snapshots import WorkspaceHead
from treadle.workflows.agent.parts.waiting import WakeSignal
from treadle.workflows.agent.workflow import AgentWorkflow

__all__ = ["DOORS", "INTERNAL", "Door", "schemas", "write"]

Kind = Literal["workflow", "signal", "update", "query"]
JSON_SCHEMA = "https://json-schema.org/draft/2020-12/schema"
_FOLDERS = {"signal": "signals", "update": "updates", "query": "queries"}


@dataclass(frozen=True)
class Door:
    """One way into the workflow: what it takes (``None``: nothing) and what it answers."""

    kind: Kind
    handler: Callable[..., Any]
    input: Any
    result: Any
    summary: str

    @property
    def name(self) -> str:
        """Its Temporal name (the workflow type for ``workflow``)."""
        definition = workflow._Definition.must_from_class(AgentWorkflow)
        if self.kind == "workflow":
            return definition.name or AgentWorkflow.__name__
        handlers: Mapping[str | None, Any] = {
            "signal": definition.signals,
            "update": definition.updates,
            "query": definition.queries,
        }[self.kind]
        for name, handler in handlers.items():
            if handler.fn is self.handler and name is not None:
                return name
        raise LookupError(f"{self.handler.__qualname__} is no {self.kind} of AgentWorkflow")


DOORS: tuple[Door, ...] = (
    Door("workflow", AgentWorkflow.run, AgentInput, AgentResult,
         "Start a run (or a thread: thread=true); its result once it is over"),
    Door("signal", AgentWorkflow.approve, ApproveSignal, None, "Approve the call waiting"),
    Door("signal", AgentWorkflow.reject, RejectSignal, None,
         "Reject the call waiting; the model reads the reason"),
    Door("signal", AgentWorkflow.modify, ModifySignal, None,
         "Run the call waiting with new arguments"),
    Door("signal", AgentWorkflow.guide, GuideSignal, None, "Guide a stuck run, or halt it"),
    Door("signal", AgentWorkflow.wake, WakeSignal, None, "End the wait tool's wait now"),
    Door("update", AgentWorkflow.decide, Decision, PendingApproval | None,
         "Approve, reject, modify or guide, refused at once with the reason when the run "
         "cannot take it; answers the call decided (none for guide)"),
    Door("update", AgentWorkflow.send, UserMessage, SendReceipt, "A thread's next message"),
    Door("update", AgentWorkflow.close, None, AgentStatus,
         "Close a thread once it has answered the messages it has"),
    Door("update", AgentWorkflow.answer_query, ClientAnswer, ClientQuery,
         "Answer (or decline) the question the run asks its client"),
    Door("query", AgentWorkflow.state, None, AgentStatus,
         "The run's status: state, step, usage, what it waits for"),
    Door("query", AgentWorkflow.trace, None, Trace, "The run's trace"),
    Door("query", AgentWorkflow.export, None, ThreadExport,
         "The run's whole conversation (Loom's JSON)"),
    Door("query", AgentWorkflow.progress, None, ProgressSummary, "Progress and stuck detection"),
    Door("query", AgentWorkflow.workspace, None, WorkspaceHead,
         "The workspace's latest snapshot"),
)  # fmt: skip

INTERNAL: dict[str, str] = {
    "subagent_waiting": "a child run tells its parent what it waits for",
    "client_answer": "a parent sends its child the answer to the child's question",
}
"""Handlers of the workflow that are between runs, not for clients: their reason."""


def _schema(value: Any, title: str) -> dict[str, Any]:
    schema = TypeAdapter(value).json_schema(mode="validation")
    return {"$schema": JSON_SCHEMA, "title": title, **schema}


def schemas() -> dict[str, dict[str, Any]]:
    """Every file of the contract, by its path: the schemas, and ``index.json`` naming each
    door with its kind, Temporal name and files."""
    files: dict[str, dict[str, Any]] = {}
    index: list[dict[str, Any]] = []
    for door in DOORS:
        name = door.name
        entry: dict[str, Any] = {"kind": door.kind, "name": name, "summary": door.summary}
        base = "workflow" if door.kind == "workflow" else f"{_FOLDERS[door.kind]}/{name}"
        if door.input is not None:
            path = f"{base}.input.json"
            files[path] = _schema(door.input, f"{name} {door.kind}: input")
            entry["input"] = path
        if door.result is not None:
            path = f"{base}.result.json"
            files[path] = _schema(door.result, f"{name} {door.kind}: result")
            entry["result"] = path
        index.append(entry)
    files["index.json"] = {
        "workflow_type": AgentWorkflow.__name__,
        "doors": index,
        "note": "Generated by `treadle schemas --out DIR` from the workflow's models; "
        "docs/contract.md shows a client in another language.",
    }
    return files


def write(directory: Path) -> list[Path]:
    """Write the contract into ``directory`` (its ``examples/`` are left alone); returns the
    files written."""
    written = []
    for relative, content in schemas().items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        written.append(path)
    return written
