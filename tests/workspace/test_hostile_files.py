"""Workspaces hold what archives and careless commands leave: a file whose name is not UTF-8 is
left out of the snapshot and named in the trace, never failing or repeating the call that made
it or any later one; a file holding a worker's key in another case, cut by a newline or quoted
in two pieces is withheld as the redactor would redact it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import start_agent, tool_messages
from tests.support.processes import clean_env, server_address, start_worker
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace import Manifests
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentConfig, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

SECRET = "Withheld0123456789abcdefGHIJKL"
"""A secret of the worker (a secret-named variable's value), no key shape of its own."""


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


BAD_NAME = "python3 -c \"open(b'bad\\xff.txt', 'w').write('x'); open('good.txt', 'w').write('y')\""
"""A command that leaves a file whose name is the bytes ``bad\\xff.txt`` (not UTF-8)."""


async def test_a_file_name_that_is_not_utf8_is_left_out_and_said(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Through ``worker.py``: a command leaves ``b'bad\\xff.txt'``; the command, the listing
    and search that name it (escaped) and the later write each run once, the run ends DONE,
    the snapshots hold the other files, and the trace names the file left out with why."""
    store = tmp_path / "store"
    model = f"badname-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            call("run_command", command=BAD_NAME),
            call("list_dir", path="."),
            call("search_files", pattern="x"),
            call("write_file", path="after.txt", content="later"),
            {"content": "done"},
        ],
    )
    task_queue = f"badname-{uuid.uuid4().hex[:10]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    worker = await start_worker(server_address(client), task_queue, env, "--store", str(store))
    try:
        config = AgentConfig(allow_run_command=True, command_allowlist=("python3",))
        handle = await start_agent(
            client, task_queue, f"openai:{model}", tmp_path / "ws", "make files",
            config=config, id_prefix="badname",
        )  # fmt: skip
        result: AgentResult = await handle.result()
        assert result.status is RunStatus.DONE, result
        history = await handle.fetch_history()
        attempts = [
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        assert attempts and set(attempts) == {1}, attempts
        trace = await handle.query(AgentWorkflow.trace)
        head = await handle.query(AgentWorkflow.workspace)
    finally:
        assert await worker.terminate() == 0
    [*_, last] = [r.body for r in model_server.requests_for(model)]
    listed, found = [m["content"] for m in tool_messages(last)][1:3]
    assert "bad\\xff.txt" in listed and "bad\\xff.txt:1: x" in found, (listed, found)
    snapshots = [e.data for e in trace.entries if e.event == "WorkspaceSnapshot"]
    assert len(snapshots) == 2, snapshots
    assert snapshots[0].endswith(" · left out 1 (name not UTF-8: bad\\xff.txt)"), snapshots
    assert "left out" not in snapshots[1], snapshots
    assert head.manifest is not None
    assert set(await Manifests(FileBlobStore(store)).state(head.manifest)) == {
        "good.txt",
        "after.txt",
    }


def stored(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file()).lower()


async def test_a_key_in_another_case_or_in_pieces_is_withheld(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Through ``worker.py`` given a secret: workspace files holding it lower-cased,
    upper-cased, split by a newline and quoted in two pieces are all withheld (as the
    redactor redacts them everywhere else); none of its fragments reaches the store."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    variants = {
        "lower.txt": SECRET.lower(),
        "upper.txt": SECRET.upper(),
        "wrapped.txt": f"{SECRET[:14]}\n{SECRET[14:]}",
        "quoted.py": f'key = "{SECRET[:14]}" "{SECRET[14:]}"',
    }
    for name, text in variants.items():
        (workspace / name).write_text(f"config\n{text}\n")
    (workspace / "plain.txt").write_text("nothing secret\n")
    store = tmp_path / "store"
    model = f"withheld-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model, [call("write_file", path="notes.md", content="hello"), {"content": "done"}]
    )
    task_queue = f"withheld-{uuid.uuid4().hex[:10]}"
    env = clean_env(OPENAI_BASE_URL=model_server.base_url, DEPLOY_TOKEN=SECRET)
    worker = await start_worker(server_address(client), task_queue, env, "--store", str(store))
    try:
        handle = await start_agent(
            client, task_queue, f"openai:{model}", workspace, "note", id_prefix="withheld"
        )
        result: AgentResult = await handle.result()
        assert result.status is RunStatus.DONE, result
        head = await handle.query(AgentWorkflow.workspace)
    finally:
        assert await worker.terminate() == 0
    assert head.manifest is not None
    manifests = Manifests(FileBlobStore(store))
    assert (await manifests.get(head.manifest)).withheld == tuple(sorted(variants))
    assert set(await manifests.state(head.manifest)) == {"plain.txt", "notes.md"}
    assert SECRET.lower()[:10].encode() not in stored(store)
    assert SECRET.lower()[14:24].encode() not in stored(store)
