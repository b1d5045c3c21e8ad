"""The JSON Schemas in schemas/ are what ``treadle schemas`` makes from today's models; every
handler of the workflow is in the contract or named internal; every example fits its schema
and the model the workflow validates with; and the stock ``temporal`` CLI starts, decides,
signals and asks runs with the examples as they are."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import TypeAdapter
from temporalio import workflow
from temporalio.common import RawValue

from tests.support.harness import Harness, temporal_cli
from treadle import contract
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus
from treadle.workflows.agent.workflow import AgentWorkflow

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
EXAMPLES = SCHEMAS / "examples"


def committed() -> dict[str, Any]:
    return {
        str(p.relative_to(SCHEMAS)): json.loads(p.read_text())
        for p in SCHEMAS.rglob("*.json")
        if EXAMPLES not in p.parents
    }


def test_the_committed_schemas_are_todays(tmp_path: Path) -> None:
    """`treadle schemas` writes exactly the files schemas/ holds, byte for byte: a model that
    changed without its schema being written again fails here (run the command in the
    message)."""
    written = contract.write(tmp_path)
    made = {str(p.relative_to(tmp_path)): p.read_text() for p in written}
    held = {
        str(p.relative_to(SCHEMAS)): p.read_text()
        for p in SCHEMAS.rglob("*.json")
        if EXAMPLES not in p.parents
    }
    assert made.keys() == held.keys(), "run: .venv/bin/treadle schemas --out schemas"
    stale = [name for name in made if made[name] != held[name]]
    assert not stale, f"stale: {stale}; run: .venv/bin/treadle schemas --out schemas"
    for name, schema in committed().items():
        if name != "index.json":
            Draft202012Validator.check_schema(schema)


def test_every_handler_of_the_workflow_is_in_the_contract() -> None:
    """Each signal, update and query the workflow defines is a door of the contract (under its
    Temporal name) or an internal one with its reason; nothing else is listed."""
    definition = workflow._Definition.must_from_class(AgentWorkflow)
    defined = {
        (kind, name)
        for kind, handlers in (
            ("signal", definition.signals),
            ("update", definition.updates),
            ("query", definition.queries),
        )
        for name in handlers
        if name is not None  # the dynamic signal: a refusal for any unknown name
    }
    doors = {(d.kind, d.name) for d in contract.DOORS if d.kind != "workflow"}
    internal = {(k, n) for k, n in defined if n in contract.INTERNAL}
    assert doors | internal == defined
    assert not doors & internal
    index = json.loads((SCHEMAS / "index.json").read_text())
    assert {(d["kind"], d["name"]) for d in index["doors"]} == doors | {
        ("workflow", "AgentWorkflow")
    }


def examples() -> list[tuple[Path, Path, contract.Door]]:
    """Each example with the schema and the door it is for, by its path:
    ``examples/<folder>/<name>.<variant>.json`` is for ``<folder>/<name>.input.json``."""
    by_schema = {}
    for door in contract.DOORS:
        folder = "" if door.kind == "workflow" else f"{contract._FOLDERS[door.kind]}/"
        name = "workflow" if door.kind == "workflow" else door.name
        by_schema[f"{folder}{name}"] = door
    found = []
    for path in sorted(EXAMPLES.rglob("*.json")):
        relative = path.relative_to(EXAMPLES)
        key = str(relative.parent / relative.name.split(".")[0]).removeprefix("./")
        door = by_schema[key]
        found.append((path, SCHEMAS / f"{key}.input.json", door))
    return found


def test_every_example_fits_its_schema_and_its_model() -> None:
    """Every example is valid against its JSON Schema and is accepted by the model the
    workflow validates it with; every door that takes input has at least one example."""
    found = examples()
    assert found
    for path, schema, door in found:
        body = json.loads(path.read_text())
        errors = list(Draft202012Validator(json.loads(schema.read_text())).iter_errors(body))
        assert not errors, f"{path.name}: {errors[0].message}"
        TypeAdapter(door.input).validate_python(body)
    covered = {door.name for _, _, door in found}
    assert covered == {d.name for d in contract.DOORS if d.input is not None}


async def temporal(harness: Harness, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The stock ``temporal`` CLI against the harness's server."""
    return await temporal_cli(harness.client, *arguments)


async def until(harness: Harness, workflow_id: str, state: str) -> AgentStatus:
    handle = harness.client.get_workflow_handle(workflow_id)
    return await harness.wait_for_state(handle, state, timeout=60)


async def test_the_stock_cli_runs_and_decides_with_the_examples_as_they_are(
    harness: Harness, demo_model: str
) -> None:
    """`temporal workflow start --input-file examples/workflow.run.json` starts a run the
    worker takes; the `decide` update from examples/updates/decide.approve.json approves its
    write; `temporal workflow query --name state` answers what the state schema describes; a
    second run is rejected by the `reject` signal from its example."""
    approved_id = f"contract-{uuid.uuid4().hex[:8]}"
    start = await temporal(
        harness, "workflow", "start", "--type", "AgentWorkflow",
        "--task-queue", harness.task_queue, "--workflow-id", approved_id,
        "--input-file", str(EXAMPLES / "workflow.run.json"),
    )  # fmt: skip
    assert start.returncode == 0, start.stderr
    harness.handles.append(harness.client.get_workflow_handle(approved_id))
    await until(harness, approved_id, "WaitingForHuman")
    update = await temporal(
        harness, "workflow", "update", "execute", "--workflow-id", approved_id,
        "--name", "decide", "--input-file", str(EXAMPLES / "updates" / "decide.approve.json"),
    )  # fmt: skip
    assert update.returncode == 0, update.stderr
    assert "write_file" in update.stdout
    await until(harness, approved_id, "Done")
    query = await temporal(
        harness, "workflow", "query", "--workflow-id", approved_id, "--name", "state",
    )  # fmt: skip
    assert query.returncode == 0, query.stderr
    assert "Done" in query.stdout
    # The payload as another SDK receives it (the CLI's rendering turns [] into null).
    raw = await harness.client.get_workflow_handle(approved_id).query("state", result_type=RawValue)
    status = json.loads(raw.payload.data)
    schema = json.loads((SCHEMAS / "queries" / "state.result.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(status))
    assert status["state"] == "Done"

    rejected_id = f"contract-{uuid.uuid4().hex[:8]}"
    start = await temporal(
        harness, "workflow", "start", "--type", "AgentWorkflow",
        "--task-queue", harness.task_queue, "--workflow-id", rejected_id,
        "--input-file", str(EXAMPLES / "workflow.run.json"),
    )  # fmt: skip
    assert start.returncode == 0, start.stderr
    harness.handles.append(harness.client.get_workflow_handle(rejected_id))
    await until(harness, rejected_id, "WaitingForHuman")
    signal = await temporal(
        harness, "workflow", "signal", "--workflow-id", rejected_id, "--name", "reject",
        "--input-file", str(EXAMPLES / "signals" / "reject.with-reason.json"),
    )  # fmt: skip
    assert signal.returncode == 0, signal.stderr
    result = await harness.client.get_workflow_handle(rejected_id, result_type=AgentResult).result()
    assert "release is frozen" in result.answer


async def test_a_thread_started_from_its_example_takes_the_send_example(
    harness: Harness, demo_model: str
) -> None:
    """A thread started by the stock CLI from examples/workflow.thread.json answers, takes the
    `send` update from its example, and closes by the `close` update (no input)."""
    thread_id = f"contract-thread-{uuid.uuid4().hex[:8]}"
    start = await temporal(
        harness, "workflow", "start", "--type", "AgentWorkflow",
        "--task-queue", harness.task_queue, "--workflow-id", thread_id,
        "--input-file", str(EXAMPLES / "workflow.thread.json"),
    )  # fmt: skip
    assert start.returncode == 0, start.stderr
    harness.handles.append(harness.client.get_workflow_handle(thread_id))
    await until(harness, thread_id, "WaitingForUserInput")
    sent = await temporal(
        harness, "workflow", "update", "execute", "--workflow-id", thread_id,
        "--name", "send", "--input-file", str(EXAMPLES / "updates" / "send.message.json"),
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert "position" in sent.stdout
    closed = await temporal(
        harness, "workflow", "update", "execute", "--workflow-id", thread_id, "--name", "close"
    )
    assert closed.returncode == 0, closed.stderr
    result = await harness.client.get_workflow_handle(thread_id, result_type=AgentResult).result()
    assert result.status.value == "done"
