"""Long-term memory across threads: what one thread remembers another of its namespace recalls,
another namespace sees nothing, a forgotten item is gone; secrets never reach it; the CLI lists
and edits it; a thread's export carries its items and an import restores them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import Harness, tool_messages
from tests.support.processes import clean_env, run_cli
from tests.support.threads import answered, start_thread
from treadle.client import AgentClient
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentStatus,
    ThreadExport,
    ThreadSettings,
)
from treadle.workflows.agent.workflow import AgentWorkflow

DEPLOY = "The team deploys on Fridays, with pnpm."
KEY = "sk-proj-" + uuid.uuid4().hex + uuid.uuid4().hex[:12]
"""A key made per run: the redactor must withhold it, and no key-shaped literal is tracked."""


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def last_tool_output(harness: Harness, model: str) -> str:
    return str(tool_messages(harness.requests(model)[-1])[-1]["content"])


@pytest.mark.replay_corpus
async def test_one_thread_remembers_another_recalls_and_a_forgotten_item_is_gone(
    harness: Harness,
) -> None:
    """Thread A remembers (a key in what it keeps is redacted first; its export carries the
    namespace's items); thread B of the same
    namespace recalls it by keyword; a thread of another namespace recalls nothing; once B
    forgets it, a recall finds nothing."""
    namespace = f"user:alice/agent:{uuid.uuid4().hex[:8]}"
    memory = {"namespace": namespace}
    a = harness.script(
        call("remember", text=DEPLOY),
        call("remember", text=f"The deploy key is {KEY}."),
        {"content": "noted"},
    )
    thread_a = await start_thread(harness, a, task="Remember how we deploy.", memory=memory)
    await answered(harness, thread_a, 1)
    assert tool_messages(harness.requests(a)[1])[-1]["content"] == f"remembered m1: {DEPLOY}"
    assert last_tool_output(harness, a) == "remembered m2: The deploy key is [redacted]."

    client = AgentClient(harness.client, task_queue=harness.task_queue)
    exported = await client.export(thread_a.id)
    assert exported.memory is not None
    assert exported.memory.items == (DEPLOY, "The deploy key is [redacted].")
    await client.forget(namespace, "m2")
    b = harness.script(
        call("recall", query="when do we deploy"),
        call("forget", id="m1"),
        call("recall", query="deploy"),
        {"content": "forgotten"},
    )
    thread_b = await start_thread(harness, b, task="When do we deploy?", memory=memory)
    await answered(harness, thread_b, 1)
    requests = harness.requests(b)
    assert tool_messages(requests[1])[-1]["content"] == f"m1: {DEPLOY}"
    assert tool_messages(requests[2])[-1]["content"].startswith("forgot m1")
    assert tool_messages(requests[3])[-1]["content"] == "no memories match"

    c = harness.script(call("recall", query="deploy"), {"content": "nothing"})
    other = {"namespace": f"user:bob/agent:{uuid.uuid4().hex[:8]}"}
    thread_c = await start_thread(harness, c, task="When do we deploy?", memory=other)
    await answered(harness, thread_c, 1)
    assert last_tool_output(harness, c) == "no memories match"
    for thread in (thread_a, thread_b, thread_c):
        await thread.execute_update(AgentWorkflow.close)
        await thread.result()


async def test_memory_tools_are_offered_only_with_a_namespace_and_take_approval(
    harness: Harness,
) -> None:
    """A run without ``memory`` is not offered the memory tools; with it, ``remember`` waits
    for approval like any tool in ``require_approval``."""
    plain = harness.script({"content": "hi"})
    handle = await start_thread(harness, plain)
    await answered(harness, handle, 1)
    offered = [t["function"]["name"] for t in harness.requests(plain)[0]["tools"]]
    assert not {"remember", "recall", "forget"} & set(offered)

    model = harness.script(call("remember", text="likes tea"), {"content": "ok"})
    memory = {"namespace": f"user:carol/agent:{uuid.uuid4().hex[:8]}"}
    handle = await start_thread(harness, model, memory=memory, require_approval=["remember"])
    status: AgentStatus = await harness.wait_for_state(handle, "WaitingForHuman")
    assert [p.tool for p in status.pending_approvals] == ["remember"]


async def test_memory_is_listed_and_edited_from_the_cli(harness: Harness) -> None:
    """``treadle memory`` adds, lists, edits and forgets a namespace's items; Python's client
    reads the same."""
    namespace = f"acme/support-{uuid.uuid4().hex[:8]}"
    cli = [*harness.cli_args(), "memory"]
    added = await run_cli(*cli, "add", namespace, "Customers are in CET.", env=clean_env())
    assert (added.returncode, added.stdout.strip()) == (0, "m1: Customers are in CET."), added
    edited = await run_cli(*cli, "edit", namespace, "m1", "Customers are in CEST.", env=clean_env())
    assert edited.returncode == 0, edited.stderr
    listed = await run_cli(*cli, "list", namespace, env=clean_env())
    assert "m1" in listed.stdout and "Customers are in CEST." in listed.stdout
    client = AgentClient(harness.client, task_queue=harness.task_queue)
    assert [i.text for i in await client.memory_items(namespace)] == ["Customers are in CEST."]
    gone = await run_cli(*cli, "forget", namespace, "m1", env=clean_env())
    assert gone.returncode == 0, gone.stderr
    assert await client.memory_items(namespace) == ()
    again = await run_cli(*cli, "forget", namespace, "m1", env=clean_env())
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: no item 'm1' in memory {namespace!r}"


async def test_an_imported_thread_brings_its_memory_into_its_new_namespace(
    harness: Harness, tmp_path: Path
) -> None:
    """A thread's export carries its namespace's items; importing the file (from a fresh home,
    into another namespace) restores them there, a secret of the importer's environment in a
    hand-edited item redacted first, and the imported thread's ``recall`` finds them; importing
    it again writes nothing twice; a thread imported without memory says what it left out."""
    namespace = f"user:alice/agent:{uuid.uuid4().hex[:8]}"
    a = harness.script(call("remember", text=DEPLOY), {"content": "noted"})
    thread_a = await start_thread(
        harness, a, task="Remember how we deploy.", memory={"namespace": namespace}
    )
    await answered(harness, thread_a, 1)
    exported = await run_cli(*harness.cli_args(), "export", thread_a.id)
    assert exported.returncode == 0, exported.stderr
    data = json.loads(exported.stdout)
    assert data["memory"] == {"namespace": namespace, "items": [DEPLOY]}
    secret = "s3cr3t-" + uuid.uuid4().hex
    data["memory"]["items"].append(f"The staging password is {secret}.")
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(data))

    fresh = f"user:bob/agent:{uuid.uuid4().hex[:8]}"
    (tmp_path / "config.json").write_text(json.dumps({"memory": {"namespace": fresh}}))
    b = harness.script(
        {"content": "(turn 1)"}, {"content": "(turn 2)"},
        call("recall", query="deploy password"), {"content": "found them"},
    )  # fmt: skip
    thread_id = f"imported-{uuid.uuid4().hex[:10]}"
    harness.handles.append(harness.client.get_workflow_handle(thread_id))
    home = tmp_path / "home"
    env = clean_env(TREADLE_HOME=str(home), STAGING_PASSWORD=secret)
    imported = await run_cli(
        *harness.cli_args(), "import", str(path), "--id", thread_id, "--model", b,
        "--config", str(tmp_path / "config.json"), "--workspace", str(harness.workspace),
        env=env,
    )  # fmt: skip
    assert (imported.returncode, imported.stdout.strip()) == (0, thread_id), imported.stderr
    assert f"memory: restored 2 item(s) into {fresh!r}" in imported.stderr
    # The importer's secrets are its environment's: this client's too, for the imports below.
    client = AgentClient(harness.client, task_queue=harness.task_queue, environ=env)
    texts = [i.text for i in await client.memory_items(fresh)]
    assert texts == [DEPLOY, "The staging password is [redacted]."]
    assert [i.text for i in await client.memory_items(namespace)] == [DEPLOY]

    sent = await run_cli(*harness.cli_args(), "send", thread_id, "What do you know?", "--wait")
    assert sent.returncode == 0, sent.stderr
    recalled = last_tool_output(harness, b).splitlines()
    assert sorted(recalled) == [f"m1: {DEPLOY}", "m2: The staging password is [redacted]."]
    again = await client.import_thread(
        ThreadExport.model_validate(data),
        settings=ThreadSettings(model=b, config=AgentConfig(memory={"namespace": fresh})),
        workspace=str(harness.workspace),
    )
    harness.handles.append(harness.client.get_workflow_handle(again.id))
    assert again.memory_note == f"memory: restored 0 item(s) into {fresh!r}; 2 already there"
    assert len(await client.memory_items(fresh)) == 2
    plain = await client.import_thread(
        ThreadExport.model_validate(data),
        settings=ThreadSettings(model=b),
        workspace=str(harness.workspace),
    )
    harness.handles.append(harness.client.get_workflow_handle(plain.id))
    assert plain.memory_note is not None and "not restored" in plain.memory_note
    for thread in (thread_a.id, thread_id, again.id, plain.id):
        await client.close(thread)
        await harness.client.get_workflow_handle(thread).result()
