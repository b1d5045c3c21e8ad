"""``treadle watch``, ``run --wait`` and ``chat`` showing a run live, as users run them (real
processes against the dev server): JSON lines when piped, resuming from an offset, answering
approvals with ``--interactive``, following a run whose worker comes late, encrypted runs."""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import os
import pty
import struct
import sys
import termios
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from tests.support.harness import Harness, scripted_worker, tool_messages
from tests.support.processes import ROOT, clean_env
from treadle.activities.model.activity import http_client
from treadle.cli import identity
from treadle.cli.shell import runnable
from treadle.codec import ENV_VAR
from treadle.connection import connect
from treadle.stream import StreamItem, StreamNotice, watch_events
from treadle.workflows.agent.messages.events import EVENTS_TOPIC, AgentEvent, ClientQuery
from treadle.workflows.agent.messages.models import AgentConfig, AgentInput, AgentResult, RunStatus
from treadle.workflows.agent.workflow import AgentWorkflow

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}
WRITE_B = {"name": "write_file", "arguments": {"path": "b.md", "content": "first idea"}}


async def starter(
    harness: Harness,
    *args: str,
    stdin: str = "",
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> tuple[int, str, str]:
    """Run ``starter.py`` with this harness's server; returns (exit code, stdout, stderr)."""
    process = await spawn(harness, *args, cwd=cwd, env=env)
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def spawn(
    harness: Harness, *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "starter.py"),
        *harness.cli_args(),
        *args,
        cwd=cwd,
        env=env if env is not None else clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@asynccontextmanager
async def in_background(
    harness: Harness, *args: str, cwd: Path = ROOT
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``starter.py`` running while the block runs; killed if the block leaves it running."""
    process = await spawn(harness, *args, cwd=cwd)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()


async def ends_cleanly(process: asyncio.subprocess.Process) -> None:
    """Wait for a background ``starter.py`` to end, as it must: with exit code 0."""
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """Every line of stdout, each one JSON object (anything else fails the test)."""
    return [json.loads(line) for line in stdout.splitlines()]


def kinds(lines: list[dict[str, Any]]) -> list[str]:
    return [line["kind"] for line in lines if line["topic"] == "events" and line["kind"] != "state"]


async def items(harness: Harness, workflow_id: str, from_offset: int | None = 0) -> list[Any]:
    return [i async for i in watch_events(harness.client, workflow_id, from_offset=from_offset)]


# --------------------------------------------------------------------------------------------
# Reading the stream
# --------------------------------------------------------------------------------------------


async def test_watch_events_reads_a_whole_run_and_resumes_from_any_offset(
    harness: Harness,
) -> None:
    """The reader yields the run's events in order (tools, the approval, the decision, the
    answer) and ends with the run; from an offset it yields exactly the rest."""
    model = harness.script(
        {"content": "Writing first.", "tool_calls": [WRITE]}, {"content": "notes.md written"}
    )
    handle = await harness.start(model, require_approval=["write_file"])
    seen: list[StreamItem] = []
    notices: list[StreamNotice] = []

    async def watch() -> None:
        async for item in watch_events(harness.client, handle.id, on_notice=notices.append):
            seen.append(item)

    watcher = asyncio.create_task(watch())
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    await handle.execute_update(
        AgentWorkflow.decide,
        {"action": "approve", "call_id": status.pending_approvals[0].call_id},
    )
    await asyncio.wait_for(watcher, 60)  # ends by itself once the run is over
    assert (await handle.result()).status is RunStatus.DONE
    events = [i.value for i in seen if isinstance(i.value, AgentEvent)]
    assert [e.kind for e in events if e.kind != "state"] == [
        "started", "model", "approval_needed", "decided", "tool_started", "tool_finished",
        "model", "answer", "ended",
    ]  # fmt: skip
    assert [i.offset for i in seen] == list(range(len(seen)))
    assert notices == []

    middle = seen[len(seen) // 2].offset
    rest = await items(harness, handle.id, from_offset=middle)
    assert [(i.offset, i.value) for i in rest] == [(i.offset, i.value) for i in seen[middle:]]
    assert await items(harness, handle.id, from_offset=None) == []  # "from now" on a done run


# --------------------------------------------------------------------------------------------
# watch: JSON lines, exit codes
# --------------------------------------------------------------------------------------------


async def test_piped_watch_prints_json_lines_only(harness: Harness) -> None:
    """Piped, every stdout line is one JSON event with its topic and offset; --from resumes;
    the exit code says how the run ended."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "done it"})
    handle = await harness.start(model)
    await handle.result()
    code, out, err = await starter(harness, "watch", handle.id, "--from-start")
    assert (code, err) == (0, ""), err
    lines = json_lines(out)
    assert kinds(lines) == [
        "started", "model", "tool_started", "tool_finished", "model", "answer", "ended",
    ]  # fmt: skip
    assert [line["offset"] for line in lines] == list(range(len(lines)))
    finished = next(line for line in lines if line["kind"] == "tool_finished")
    assert (finished["tool"], finished["target"], finished["ok"]) == (
        "write_file",
        "notes.md",
        True,
    )
    assert lines[-1]["state"] == "Done"

    code, out, _ = await starter(harness, "watch", handle.id, "--from", str(lines[-3]["offset"]))
    assert code == 0
    assert json_lines(out) == lines[-3:]

    failing = harness.script({"tool_calls": [{"name": "list_dir", "arguments": {}}]})
    failed = await harness.start(failing, max_steps=1)
    await failed.result()
    code, out, _ = await starter(harness, "watch", failed.id, "--from-start")
    assert code == 1
    assert kinds(json_lines(out))[-2:] == ["error", "ended"]


async def test_watch_refuses_what_it_cannot_watch(harness: Harness) -> None:
    """An unknown id, or a negative offset: one line, exit 2."""
    code, _, err = await starter(harness, "watch", f"no-such-{uuid.uuid4().hex[:6]}")
    assert code == 2 and err.startswith("error: no run with id"), err
    code, _, err = await starter(harness, "watch", "x", "--from", "-3")
    assert code == 2 and "--from must be" in err


async def test_watch_waits_for_a_worker_and_goes_on_when_one_comes(harness: Harness) -> None:
    """A run nobody works on: watch says it waits for a worker, and follows the run once a
    worker starts."""
    model = harness.script({"content": "late but here"})
    queue = f"late-{uuid.uuid4().hex[:8]}"
    handle = await harness.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(task="x", model=model, workspace=str(harness.workspace), config=AgentConfig()),
        id=f"late-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    harness.handles.append(handle)
    process = await spawn(harness, "watch", handle.id)
    assert process.stderr is not None
    line = await asyncio.wait_for(process.stderr.readline(), 60)
    assert b"waiting for a worker" in line
    async with http_client() as http, scripted_worker(harness.client, queue, harness.models, http):
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err
    assert "late but here" in [e.get("text") for e in json_lines(out.decode())]
    assert b"a worker answers again" in err


# --------------------------------------------------------------------------------------------
# Interactive approvals, run --wait, chat
# --------------------------------------------------------------------------------------------


async def test_interactive_watch_approves_and_modifies(harness: Harness) -> None:
    """--interactive asks about each waiting call: one approved, one modified with new JSON
    arguments; both are confirmed by the run and the run finishes."""
    model = harness.script({"tool_calls": [WRITE]}, {"tool_calls": [WRITE_B]}, {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    modified = json.dumps({"path": "b.md", "content": "better idea"})
    code, out, err = await starter(
        harness, "watch", handle.id, "--interactive", stdin=f"a\nm\n{modified}\n"
    )
    assert code == 0, err
    assert err.count("approve, reject, modify, or skip") == 2
    decided = [line["text"] for line in json_lines(out) if line["kind"] == "decided"]
    assert [d.split()[0] for d in decided] == ["approve", "modify"]
    assert (harness.workspace / "notes.md").read_text() == "hello"
    assert (harness.workspace / "b.md").read_text() == "better idea"


async def test_on_a_terminal_watch_keeps_a_status_line_and_asks(harness: Harness) -> None:
    """On a (pseudo-)terminal: readable lines and a status line with the state, the call and
    its commands, and the question answered by typing; the run finishes."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "terminal done"})
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "starter.py"), *harness.cli_args(), "watch", handle.id,
        "--interactive", cwd=ROOT, env=clean_env(TERM="xterm"),
        stdin=child_fd, stdout=child_fd, stderr=child_fd,
    )  # fmt: skip
    os.close(child_fd)
    screen = bytearray()

    async def read_until(wanted: bytes) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60  # a watchdog against a hang, not a measured duration
        while wanted not in screen:
            assert loop.time() < deadline, screen.decode(errors="replace")  # the watchdog
            try:
                screen.extend(await asyncio.to_thread(os.read, main_fd, 4096))
            except OSError:  # the child closed the terminal
                break

    try:
        await read_until(b"[a/r/m/s]")
        os.write(main_fd, b"a\n")
        await read_until(b"terminal done")
        assert await asyncio.wait_for(process.wait(), 60) == 0
    finally:
        if process.returncode is None:
            process.kill()
        os.close(main_fd)
    shown = screen.decode(errors="replace")
    assert "needs approval" in shown and f"treadle approve {handle.id}" in shown
    assert "WaitingForHuman · step 1" in shown  # the status line
    assert "\x1b[" in shown  # a terminal gets styles and cursor moves, a pipe does not
    assert (harness.workspace / "notes.md").read_text() == "hello"


async def test_interactive_reject_sends_the_reason_to_the_model(harness: Harness) -> None:
    """Reject with a reason: the call does not run and the model reads why."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "fine, not writing"})
    handle = await harness.start(model, require_approval=["write_file"])
    code, _, err = await starter(
        harness, "watch", handle.id, "--interactive", stdin="r\nnot in my repo\n"
    )
    assert code == 0, err
    assert not (harness.workspace / "notes.md").exists()
    [observation] = tool_messages(harness.requests(model)[-1])
    assert "not in my repo" in observation["content"]


async def test_interactive_guidance_for_a_stuck_run(harness: Harness) -> None:
    """A stuck run asking a human (recovery ask_human): --interactive shows why and sends the
    typed guidance, which the model reads."""
    (harness.workspace / "main.go").write_text("package main\n")
    bad = {
        "name": "edit_file",
        "arguments": {"path": "main.go", "old_text": "func missing()", "new_text": "x"},
    }
    model = harness.script(
        {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"content": "ok"}
    )
    handle = await harness.start(model, recovery="ask_human")
    code, out, err = await starter(
        harness,
        "watch",
        handle.id,
        "--from-start",
        "--interactive",
        stdin="g\nthere is no such function\n",
    )
    assert code == 0, err
    assert "stuck: guide the model, halt the run, or skip? [g/h/s] g" in err
    needed = [line for line in json_lines(out) if line["kind"] == "guidance_needed"]
    assert needed and needed[0]["commands"]
    last = harness.requests(model)[-1]["messages"][-1]
    assert last["content"] == "Guidance from a human: there is no such function"


async def test_run_wait_shows_the_run_and_keeps_its_last_line(harness: Harness) -> None:
    """run --wait, piped: readable lines as the run goes (tool calls, the approval with its
    commands), then the result line as before; --interactive approves from standard input."""
    model = harness.script(
        {"content": "Let me write.", "tool_calls": [WRITE]}, {"content": "All done."}
    )
    workflow_id = f"cli-{uuid.uuid4().hex[:12]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    code, out, err = await starter(
        harness, "run", "Write notes", "--model", model, "--workspace", str(harness.workspace),
        "--require-approval", "write_file", "--id", workflow_id, "--wait", "--interactive",
        stdin="a\n",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    call = lines[1].removeprefix("⏸ write_file notes.md needs approval (call ").removesuffix(")")
    assert lines[:4] == [
        "Let me write.",
        f"⏸ write_file notes.md needs approval (call {call})",
        f"  arguments: {json.dumps(WRITE['arguments'])}",
        f"  {runnable(f'treadle approve {workflow_id} --call {call}')}",
    ]
    prompt = f"write_file {json.dumps(WRITE['arguments'])} ({call}): approve, reject, modify"
    assert f"{prompt}, or skip? [a/r/m/s] a" in lines
    assert lines[-6:-1] == [
        f"• decided: approve {call} by {identity.default_name()}",  # who typed it
        "→ write_file notes.md",
        "✓ write_file notes.md (wrote 5 bytes to notes.md)",
        "All done.",
        "■ Done",
    ]
    assert lines[-1].startswith(f"{workflow_id}: done after 2 step(s), ")
    assert out.count("All done.") == 1


async def test_chat_shows_tool_lines_as_the_turn_runs(harness: Harness) -> None:
    """chat prints the turn's tool calls as they happen, then the answer once."""
    model = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]}, {"content": "nothing there"}
    )
    thread_id = f"cli-thread-{uuid.uuid4().hex[:10]}"
    harness.handles.append(harness.client.get_workflow_handle(thread_id))
    code, out, err = await starter(
        harness, "chat", "--model", model, "--workspace", str(harness.workspace),
        "--id", thread_id, "look around", stdin="/close\n",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert "→ list_dir ." in lines
    assert lines.count("agent> nothing there") == 1
    assert lines.index("→ list_dir .") < lines.index("agent> nothing there")


async def test_streamed_text_shows_once_even_when_the_stream_is_cut_and_retried(
    harness: Harness,
) -> None:
    """A slow streamed reply cut mid-way and retried: run --wait shows its text as it comes,
    exactly once; watch --json has the token batches of both attempts."""
    text = " ".join(f"w{i}" for i in range(40))
    model = harness.script({"content": text, "chunk_delay": 0.06, "cut_after": 25})
    workflow_id = f"cli-{uuid.uuid4().hex[:12]}"
    harness.handles.append(harness.client.get_workflow_handle(workflow_id))
    code, out, err = await starter(
        harness, "run", "Talk", "--model", model, "--workspace", str(harness.workspace),
        "--id", workflow_id, "--wait",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[:2] == [text, "■ Done"]
    code, out, err = await starter(harness, "watch", workflow_id, "--from-start")
    assert code == 0, err
    tokens = [line for line in json_lines(out) if line["topic"] == "tokens"]
    assert {t["attempt"] for t in tokens} == {1, 2}
    assert all(text[t["text_offset"] :].startswith(t["text"]) for t in tokens)


# --------------------------------------------------------------------------------------------
# Client queries
# --------------------------------------------------------------------------------------------


def ask(kind: str, what: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "ask_client", "arguments": {"kind": kind, "what": what}}]}


async def watched(
    harness: Harness,
    turns: list[dict[str, Any]],
    *flags: str,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> tuple[WorkflowHandle[Any, Any], str, str, list[dict[str, Any]]]:
    """A run of scripted ``turns`` watched to its end by ``watch`` with ``flags``: its handle,
    watch's stdout and stderr, and the model's requests."""
    model = harness.script(*turns)
    handle = await harness.start(model)
    code, out, err = await starter(harness, "watch", handle.id, *flags, cwd=cwd, env=env)
    assert code == 0, err
    return handle, out, err, harness.requests(model)


async def test_watch_answers_a_file_read_from_its_directory(
    harness: Harness, tmp_path: Path
) -> None:
    """With --allow-reads, watch sends the file from its own working directory; a path that
    leads out of it is declined without asking."""
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    (client_dir / "notes.md").write_text("client-side notes")
    (tmp_path / "secret.txt").write_text("never")
    turns = [
        ask("file_read", "notes.md"),
        ask("file_read", "../secret.txt"),
        {"content": "read it"},
    ]
    _, out, _, requests = await watched(harness, turns, "--allow-reads", cwd=client_dir)
    [first] = tool_messages(requests[1])
    assert first["content"] == "The client's file notes.md:\nclient-side notes"
    second = tool_messages(requests[2])[-1]["content"]
    assert second.startswith("ERROR: the client declined") and "outside" in second
    assert "never" not in json.dumps(requests)
    answered = [line for line in json_lines(out) if line["kind"] == "client_answered"]
    assert [a["ok"] for a in answered] == [True, False]


async def read_stderr_until(process: asyncio.subprocess.Process, wanted: str) -> str:
    """Lines of a running process's stderr, up to the one holding ``wanted``."""
    assert process.stderr is not None
    seen = ""
    while wanted not in seen:
        line = await asyncio.wait_for(process.stderr.readline(), 60)
        assert line, f"stderr ended without {wanted!r}:\n{seen}"
        seen += line.decode()
    return seen


async def test_a_client_with_no_one_to_ask_leaves_a_file_read_to_another(
    harness: Harness, tmp_path: Path
) -> None:
    """Piped, without --allow-reads, watch does not decline a file read (that would pre-empt a
    client that may answer): it says the query is left, and another client with --allow-reads
    answers it; both end with the run."""
    (tmp_path / "notes.md").write_text("sent by the second client")
    model = harness.script(ask("file_read", "notes.md"), {"content": "ok"})
    handle = await harness.start(model)
    await harness.wait_for_state(handle, "WaitingForClient")
    async with in_background(harness, "watch", handle.id, cwd=tmp_path) as first:
        said = await read_stderr_until(first, "is left to another client")
        assert "no one here to ask and no --allow-reads" in said
        assert f"treadle answer {handle.id} q1" in said
        await asyncio.sleep(0.5)
        await harness.wait_for_state(handle, "WaitingForClient")  # not declined
        code, _, err = await starter(harness, "watch", handle.id, "--allow-reads", cwd=tmp_path)
        assert code == 0, err
        await ends_cleanly(first)
    [observation] = tool_messages(harness.requests(model)[1])
    assert observation["content"] == "The client's file notes.md:\nsent by the second client"


async def test_decline_queries_declines_what_this_client_cannot_answer(
    harness: Harness, tmp_path: Path
) -> None:
    """--decline-queries: piped and without the flag that would answer, a file read and a
    question are declined at once, each saying why."""
    (tmp_path / "notes.md").write_text("x")
    turns = [ask("file_read", "notes.md"), ask("question", "Which branch?"), {"content": "ok"}]
    _, _, _, requests = await watched(harness, turns, "--decline-queries", cwd=tmp_path)
    [read] = tool_messages(requests[1])
    assert read["content"].startswith("ERROR: the client declined")
    assert "--allow-reads" in read["content"]
    question = tool_messages(requests[2])[-1]["content"]
    assert "no one at the client can answer questions" in question
    code, _, err = await starter(harness, "watch", "x", "--no-answer", "--decline-queries")
    assert code == 2 and "not allowed with argument" in err


async def test_a_secret_looking_file_is_declined_even_with_allow_reads(
    harness: Harness, tmp_path: Path
) -> None:
    """--allow-reads sends ordinary files, never a ``.env`` (declined, saying why and how it
    could be sent); the value of the client's exported key is redacted from what is sent."""
    # A canary made at run time: no key-shaped text sits in the repository.
    key = f"canary-{uuid.uuid4().hex}"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    (tmp_path / "deploy.sh").write_text(f"curl -H 'Authorization: Bearer {key}' ...\n")
    turns = [ask("file_read", ".env"), ask("file_read", "deploy.sh"), {"content": "ok"}]
    handle, _, _, requests = await watched(
        harness, turns, "--allow-reads", cwd=tmp_path, env=clean_env(MY_SERVICE_TOKEN=key)
    )
    [declined] = tool_messages(requests[1])
    assert declined["content"].startswith("ERROR: the client declined")
    assert "looks like a secret (it matches .env)" in declined["content"]
    assert "consents at a terminal" in declined["content"]
    sent = tool_messages(requests[2])[-1]["content"]
    assert sent == "The client's file deploy.sh:\ncurl -H 'Authorization: Bearer [redacted]' ...\n"
    assert key not in json.dumps(requests)
    history = [event async for event in handle.fetch_history_events()]
    assert key not in str(history)


async def test_environment_only_from_the_allow_list_and_never_secrets(harness: Harness) -> None:
    """--env names what may be shared; a *_KEY is refused even when named."""
    turns = [ask("environment", "BUILD_MODE, MY_API_KEY, HOME"), {"content": "ok"}]
    env = clean_env(BUILD_MODE="release", MY_API_KEY="sk-do-not-leak")
    _, _, err, requests = await watched(
        harness, turns, "--env", "BUILD_MODE", "--env", "MY_API_KEY", env=env
    )
    assert "--env MY_API_KEY: never shared" in err
    [observation] = tool_messages(requests[1])
    assert observation["content"].splitlines() == [
        "The client's environment (BUILD_MODE, MY_API_KEY, HOME):",
        "BUILD_MODE=release",
        "not shared: MY_API_KEY (a secret: never shared), HOME (not in the client's --env "
        "allow-list)",
    ]
    assert "sk-do-not-leak" not in json.dumps(requests)


async def test_answer_by_hand_and_its_refusals(harness: Harness) -> None:
    """`answer ID QUERY_ID TEXT` answers a question; a wrong id, or nothing waiting, is one line
    and exit 2; --decline tells the model why."""
    model = harness.script(
        ask("question", "Which branch?"), ask("question", "Sure?"), {"content": "ok"}
    )
    handle = await harness.start(model)
    status = await harness.wait_for_state(handle, "WaitingForClient")
    assert status.client_query is not None and status.client_query.what == "Which branch?"
    code, _, err = await starter(harness, "answer", handle.id, "q99", "main")
    assert code == 2 and "refused the answer: unknown query id 'q99'" in err, err
    code, out, err = await starter(harness, "answer", handle.id, status.client_query.id, "main")
    assert code == 0, err
    assert out.startswith(f"answered {status.client_query.id} (question: Which branch?)")
    second = await harness.wait_for_state(handle, "WaitingForClient")
    assert second.client_query is not None and second.client_query.id != status.client_query.id
    code, _, err = await starter(
        harness, "answer", handle.id, second.client_query.id, "--decline", "ask me later"
    )
    assert code == 0, err
    assert (await handle.result()).status is RunStatus.DONE
    code, _, err = await starter(harness, "answer", handle.id, "q1", "late")
    assert code == 2 and "no client query waiting" in err
    requests = harness.requests(model)
    assert tool_messages(requests[1])[0]["content"] == "The client answered: main"
    assert "declined" in tool_messages(requests[2])[-1]["content"]
    assert "ask me later" in tool_messages(requests[2])[-1]["content"]


async def test_chat_answers_a_client_query_too(harness: Harness) -> None:
    """chat answers the thread's client queries by the same policy (here --env), and shows the
    query and its answer before the turn's answer."""
    model = harness.script(ask("environment", "BUILD_MODE"), {"content": "release it is"})
    thread_id = f"cli-thread-{uuid.uuid4().hex[:10]}"
    harness.handles.append(harness.client.get_workflow_handle(thread_id))
    code, out, err = await starter(
        harness, "chat", "--model", model, "--workspace", str(harness.workspace), "--id",
        thread_id, "--env", "BUILD_MODE", "which mode?", stdin="/close\n",
        env=clean_env(BUILD_MODE="release"),
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    asked = next(i for i, line in enumerate(lines) if line.startswith("? the run asks for"))
    assert lines[asked].startswith("? the run asks for the environment variable(s) BUILD_MODE")
    assert lines.index("agent> release it is") > asked
    [observation] = tool_messages(harness.requests(model)[1])
    assert observation["content"].endswith("BUILD_MODE=release")


async def test_a_question_waits_for_someone_who_can_answer(harness: Harness) -> None:
    """Piped, a question is neither asked nor declined: watch says how to answer it, and the
    printed command answers it by hand."""
    model = harness.script(ask("question", "Which branch?"), {"content": "ok"})
    handle = await harness.start(model)
    async with in_background(harness, "watch", handle.id) as watching:
        said = await read_stderr_until(watching, "Answer it with: ")
        printed = said.rsplit("Answer it with: ", 1)[1].strip()
        assert printed == runnable(f'treadle answer {handle.id} q1 "..."')
        await harness.wait_for_state(handle, "WaitingForClient")
        code, _, err = await starter(harness, "answer", handle.id, "q1", "main")
        assert code == 0, err
        await ends_cleanly(watching)
    [observation] = tool_messages(harness.requests(model)[1])
    assert observation["content"] == "The client answered: main"


async def test_the_run_not_its_stream_says_what_is_asked(harness: Harness, tmp_path: Path) -> None:
    """Anyone who may signal a run can publish on its stream: a planted ``client_query`` naming
    another file is only a trigger (the file the run's status names is read), and a planted
    approval offers nothing to approve."""
    (tmp_path / "real.txt").write_text("the real one")
    (tmp_path / "fake.txt").write_text("planted")
    model = harness.script({"tool_calls": [WRITE]}, ask("file_read", "real.txt"), {"content": "ok"})
    handle = await harness.start(model, require_approval=["write_file"])
    status = await harness.wait_for_state(handle, "WaitingForHuman")
    at = datetime.now(UTC)
    planted = ClientQuery(
        id="q1", kind="file_read", what="fake.txt", call_id="call_x", step=1, asked_at=at
    )
    publisher = WorkflowStreamClient.create(harness.client, handle.id)
    events = publisher.topic(EVENTS_TOPIC, type=AgentEvent)
    async with publisher:
        events.publish(AgentEvent(
            kind="approval_needed", step=1, state="WaitingForHuman", at=at, tool="write_file",
            text="write_file harmless.md", call_id="call_fake", arguments={"path": "harmless.md"},
        ))  # fmt: skip
        events.publish(
            AgentEvent(kind="client_query", step=1, state="WaitingForClient", at=at, query=planted)
        )
    await handle.execute_update(
        AgentWorkflow.decide,
        {"action": "approve", "call_id": status.pending_approvals[0].call_id},
    )
    asked = await harness.wait_for_state(handle, "WaitingForClient")
    assert asked.client_query is not None
    assert (asked.client_query.id, asked.client_query.what) == ("q1", "real.txt")
    code, out, err = await starter(
        harness, "watch", handle.id, "--from-start", "--interactive", "--allow-reads",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert "call_fake" in out  # shown as the stream has it...
    assert "approve, reject" not in err  # ...but nothing is offered that the run does not hold
    assert "the stream's copy of q1 is not what the run asks" in err
    observation = tool_messages(harness.requests(model)[2])[-1]
    assert observation["content"] == "The client's file real.txt:\nthe real one"
    assert "planted" not in json.dumps(harness.requests(model))


# --------------------------------------------------------------------------------------------
# Encryption
# --------------------------------------------------------------------------------------------


async def test_watch_reads_an_encrypted_run(harness: Harness) -> None:
    """With TREADLE_ENCRYPTION_KEYS, the stream's answers are decrypted by the client's codec
    and its items read as usual; without the keys watch says why in one line."""
    keys = f"watch:{base64.b64encode(os.urandom(32)).decode()}"
    address = harness.client.service_client.config.target_host
    client = await connect(address=address, namespace="default", environ={ENV_VAR: keys})
    queue = f"enc-{uuid.uuid4().hex[:8]}"
    model = harness.script({"tool_calls": [WRITE]}, {"content": "sealed answer"})
    async with http_client() as http, scripted_worker(client, queue, harness.models, http):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="x", model=model, workspace=str(harness.workspace), config=AgentConfig()
            ),
            id=f"enc-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            result_type=AgentResult,
        )
        await handle.result()
        code, out, err = await starter(
            harness, "watch", handle.id, "--from-start", env=clean_env(**{ENV_VAR: keys})
        )
        assert code == 0, err
        assert "sealed answer" in [line["text"] for line in json_lines(out)]
        code, out, err = await starter(harness, "watch", handle.id, "--from-start")
        assert code == 2 and out == ""
        assert len(err.splitlines()) == 1 and err.startswith("error: "), err
