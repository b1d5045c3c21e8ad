"""Loom's server query on Temporal: the model asks for something only the client has, the run
waits in WaitingForClient, the answer (an update with a validator) becomes the call's result,
and a timeout or a refusal is an ``ERROR:`` observation. Detection is a pure function, tested
on Loom's examples and by properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.support.harness import (
    Harness,
    keep_history,
    replayer,
    run_to_end_on_time_skipping,
    tool_messages,
)
from tests.support.stream import events
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.catalogue import AskClientArgs, parse_arguments
from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.models import AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.parts.client_queries import MAX_DETECTED_TEXT, detect, detected_call
from treadle.workflows.agent.workflow import AgentWorkflow

ASK_FILE = {"name": "ask_client", "arguments": {"kind": "file_read", "what": "src/main.rs"}}

# --------------------------------------------------------------------------------------------
# Detection (Loom's QueryDetectionStrategy), on its own
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Loom's own examples.
        ("I need to read src/main.rs", ("file_read", "src/main.rs")),
        ("What's in the environment?", ("environment", "*")),
        # The same requests, worded as models word them.
        ("I need to read src/main.rs before I can answer.", ("file_read", "src/main.rs")),
        ("Could you show me config/settings.toml?", ("file_read", "config/settings.toml")),
        ("Let me look at the file `README.md`.", ("file_read", "README.md")),
        ("I'd like to see the contents of ./docs/intro.md", ("file_read", "./docs/intro.md")),
        ("Please send me Cargo.toml so I can check the version.", ("file_read", "Cargo.toml")),
        ("What is in the environment?", ("environment", "*")),
        ("What is the value of the environment variable HOME?", ("environment", "HOME")),
        ("I need to know the env var `RUST_LOG`.", ("environment", "RUST_LOG")),
        ("I need to see your environment variables.", ("environment", "*")),
        ("Could you tell me the value of the env var PATH?", ("environment", "PATH")),
        ("Could you send me your environment?", ("environment", "*")),
    ],
)
def test_detection_finds_what_is_asked(text: str, expected: tuple[str, str]) -> None:
    assert detect(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I wrote notes.md with the summary.",
        "Done. src/main.rs now compiles and the tests pass.",
        "The environment is set up; run make test.",
        "Read README.md for details.",
        # Advice to the user is not a request for the model (found by review).
        "Done. Please open index.html in your browser to see it.",
        "I updated src/app.py. Please check the file src/app.py to confirm the fix.",
        "I fixed the bug in main.py. Please read CONTRIBUTING.md before merging.",
        "Please inspect e.g. the log.",
        "I need to check v1.2 compatibility next.",
        "The version is now 2.1. Let me see 3.5 next time.",
        "Please check your environment variables for PATH.",
        "",
        # A long answer that happens to contain a request is an answer, not a request.
        "Here is the full report. " * 30 + "I need to read src/main.rs",
    ],
)
def test_detection_leaves_answers_alone(text: str) -> None:
    assert detect(text) is None


@given(st.text(max_size=MAX_DETECTED_TEXT + 50))
def test_detection_is_total_and_deterministic(text: str) -> None:
    """Any text: no exception, the same result twice, a path that is in the text, and a call
    that passes the ask_client schema (a detection can never wedge the run)."""
    found = detect(text)
    assert found == detect(text)
    if found is not None:
        kind, what = found
        assert kind in ("file_read", "environment")
        assert what == "*" or what in text
        args = parse_arguments("ask_client", detected_call(kind, what, step=1).arguments)
        assert isinstance(args, AskClientArgs) and (args.kind, args.what) == (kind, what)


@given(
    st.sampled_from(
        ["I need to read {}", "Could you show me {}?", "Let me look at the file `{}`.", "{}"]
    ),
    st.from_regex(r"[a-z][a-z0-9_]{0,7}(/[a-z][a-z0-9_-]{0,7}){0,3}\.[a-z]{1,4}", fullmatch=True),
)
def test_a_request_for_any_path_is_found_and_a_bare_path_is_not(template: str, path: str) -> None:
    found = detect(template.format(path))
    assert found == (None if template == "{}" else ("file_read", path))


# --------------------------------------------------------------------------------------------
# The run side
# --------------------------------------------------------------------------------------------


async def waiting_query(harness: Harness, handle: WorkflowHandle[Any, Any]) -> ClientQuery:
    status: AgentStatus = await harness.wait_for_state(handle, "WaitingForClient")
    assert status.client_query is not None
    return status.client_query


@pytest.mark.replay_corpus
async def test_the_ask_client_tool_waits_for_the_answer(harness: Harness) -> None:
    """ask_client: the run waits in WaitingForClient, publishes the query with the commands
    that answer it, and the answer is the call's result in the model's next request."""
    model = harness.script({"tool_calls": [ASK_FILE]}, {"content": "main.rs prints hello"})
    handle = await harness.start(model)
    query = await waiting_query(harness, handle)
    assert (query.kind, query.what, query.detected) == ("file_read", "src/main.rs", False)
    published = [e for e in await events(handle) if e.kind == "client_query"]
    assert published and published[0].query == query
    assert any("answer_query" in c for c in published[0].commands)

    answered: ClientQuery = await handle.execute_update(
        AgentWorkflow.answer_query,
        ClientAnswer(
            query_id=query.id, kind="file_read", content='fn main() { println!("hello") }'
        ),
    )
    assert answered.id == query.id
    result: AgentResult = await handle.result()
    assert (result.status, result.answer) == (RunStatus.DONE, "main.rs prints hello")
    [tool] = tool_messages(harness.requests(model)[1])
    assert tool["content"].startswith("The client's file src/main.rs:\nfn main()")
    stream = await events(handle)
    done = next(e for e in stream if e.kind == "client_answered")
    assert done.ok is True
    history = await handle.fetch_history()
    await replayer().replay_workflow(history)
    keep_history("client-query-answered", history)


async def test_a_query_detected_in_the_text_is_answered(harness: Harness) -> None:
    """Loom's detection: a reply that asks for a file waits for it instead of ending the run."""
    model = harness.script(
        {"content": "I need to read src/main.rs"}, {"content": "It prints hello."}
    )
    handle = await harness.start(model)
    query = await waiting_query(harness, handle)
    assert (query.kind, query.what, query.detected) == ("file_read", "src/main.rs", True)
    await handle.execute_update(
        AgentWorkflow.answer_query,
        ClientAnswer(query_id=query.id, kind="file_read", content="fn main() {}"),
    )
    result: AgentResult = await handle.result()
    assert result.answer == "It prints hello."
    second = harness.requests(model)[1]["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert assistant["content"] == "I need to read src/main.rs"
    assert assistant["tool_calls"][0]["function"]["name"] == "ask_client"
    assert tool_messages(harness.requests(model)[1])[0]["content"].endswith("fn main() {}")
    trace = await handle.query(AgentWorkflow.trace)
    assert "ClientQueryDetected" in [e.event for e in trace.entries]


async def test_detection_can_be_turned_off(harness: Harness) -> None:
    model = harness.script({"content": "I need to read src/main.rs"})
    handle = await harness.start(model, client_queries=False)
    result: AgentResult = await handle.result()
    assert result.answer == "I need to read src/main.rs"
    assert "ask_client" not in [
        t["function"]["name"] for t in harness.requests(model)[0].get("tools", [])
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"query_id": "q9", "kind": "file_read", "content": "x"}, "unknown query id"),
        ({"query_id": "q1", "kind": "environment", "content": "x"}, "is a file_read query"),
        ({"query_id": "q1", "kind": "file_read", "content": "x" * 201}, "at most 200"),
        ({"query_id": "q1", "kind": "file_read"}, "exactly one of content or declined"),
        ({"query_id": "q1", "kind": "file_read", "content": "x", "declined": "no"}, "exactly one"),
        ({"query_id": "q1", "kind": "telepathy", "content": "x"}, "kind"),
        ({"query": "q1"}, "query_id"),
    ],
)
async def test_bad_answers_are_refused_and_leave_no_history(
    harness: Harness, body: dict[str, Any], reason: str
) -> None:
    """Unknown id, wrong kind, oversized, malformed: refused with the reason, nothing recorded,
    and the query still waits for a good answer."""
    model = harness.script({"tool_calls": [ASK_FILE]}, {"content": "ok"})
    handle = await harness.start(model, client_query_max_answer_chars=200)
    await waiting_query(harness, handle)
    before = len((await handle.fetch_history()).events)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("answer_query", body)
    assert reason in str(refused.value.cause), refused.value.cause
    assert len((await handle.fetch_history()).events) == before
    await handle.execute_update(
        AgentWorkflow.answer_query, ClientAnswer(query_id="q1", kind="file_read", content="ok")
    )
    assert (await handle.result()).status is RunStatus.DONE


async def test_a_query_among_parallel_calls_lets_the_others_run_concurrently(
    harness: Harness,
) -> None:
    """ask_client in a parallel step is asked first; once answered, the step's other calls run
    concurrently (back to ParallelActing), and every call has its result."""
    reads = [
        {"name": "list_dir", "arguments": {"path": "."}},
        ASK_FILE,
        {"name": "list_dir", "arguments": {"path": "."}},
    ]
    model = harness.script({"tool_calls": reads}, {"content": "all three"})
    handle = await harness.start(model)
    query = await waiting_query(harness, handle)
    await handle.execute_update(
        AgentWorkflow.answer_query,
        ClientAnswer(query_id=query.id, kind="file_read", content="fn main() {}"),
    )
    assert (await handle.result()).answer == "all three"
    results = tool_messages(harness.requests(model)[1])
    assert len(results) == 3
    assert results[1]["content"].startswith("The client's file src/main.rs:")
    trace = [(e.event, e.data) for e in (await handle.query(AgentWorkflow.trace)).entries]
    assert ("ClientQuery", "ParallelActing -> WaitingForClient") in trace
    assert ("ClientQueryDoneParallel", "WaitingForClient -> ParallelActing") in trace


async def test_a_run_that_does_not_offer_ask_client_neither_asks_nor_detects(
    harness: Harness,
) -> None:
    """Blacklisted (or client_queries off): a question in the text is the answer, and a call
    of the tool anyway is an ERROR observation, not a wait."""
    model = harness.script({"tool_calls": [ASK_FILE]}, {"content": "I need to read src/main.rs"})
    handle = await harness.start(model, blacklisted_tools=["ask_client"])
    result: AgentResult = await handle.result()
    assert result.answer == "I need to read src/main.rs"
    [tool] = tool_messages(harness.requests(model)[1])
    assert tool["content"].startswith("ERROR:")
    model = harness.script({"tool_calls": [ASK_FILE]}, {"content": "fine"})
    handle = await harness.start(model, client_queries=False)
    assert (await handle.result()).answer == "fine"
    [tool] = tool_messages(harness.requests(model)[1])
    assert tool["content"] == (
        "ERROR: ask_client is not offered in this run (client_queries is off)"
    )


async def test_an_answer_without_a_query_is_refused(harness: Harness) -> None:
    model = harness.script(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "a"}}]},
        {"content": "done"},
    )
    handle = await harness.start(model, require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            AgentWorkflow.answer_query, ClientAnswer(query_id="q1", kind="question", content="x")
        )
    assert "no client query is pending" in str(refused.value.cause)
    await handle.signal(AgentWorkflow.approve, {})
    await handle.result()


async def test_a_declined_query_is_an_error_observation(harness: Harness) -> None:
    ask = {"name": "ask_client", "arguments": {"kind": "environment", "what": "AWS_SECRET"}}
    model = harness.script({"tool_calls": [ask]}, {"content": "fine"})
    handle = await harness.start(model)
    query = await waiting_query(harness, handle)
    await handle.execute_update(
        AgentWorkflow.answer_query,
        ClientAnswer(query_id=query.id, kind="environment", declined="not on the allow-list"),
    )
    assert (await handle.result()).status is RunStatus.DONE
    [tool] = tool_messages(harness.requests(model)[1])
    assert tool["content"] == (
        "ERROR: the client declined the environment query (AWS_SECRET): not on the allow-list"
    )


async def test_the_stock_cli_answers_a_query(harness: Harness) -> None:
    """`temporal workflow update execute --name answer_query --input '{...}'` works."""
    ask = {"name": "ask_client", "arguments": {"kind": "question", "what": "Which branch?"}}
    model = harness.script({"tool_calls": [ask]}, {"content": "main it is"})
    handle = await harness.start(model)
    query = await waiting_query(harness, handle)
    body = json.dumps({"query_id": query.id, "kind": "question", "content": "main"})
    done = await harness.temporal(
        "workflow", "update", "execute", "--workflow-id", handle.id,
        "--name", "answer_query", "--input", body,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (await handle.result()).answer == "main it is"
    [tool] = tool_messages(harness.requests(model)[1])
    assert tool["content"] == "The client answered: main"


async def test_an_unanswered_query_times_out_into_an_error_observation(
    time_skipping: WorkflowEnvironment, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Nobody answers: after the timeout (a durable timer, skipped here) the model is told,
    and the run goes on to its answer instead of failing."""
    name, result, trace = await run_to_end_on_time_skipping(
        time_skipping,
        model_server,
        tmp_path,
        [{"tool_calls": [ASK_FILE]}, {"content": "no file, so I guessed"}],
        task="What does main.rs do?",
        client_query_timeout_seconds=3600,
    )
    assert (result.status, result.answer) == (RunStatus.DONE, "no file, so I guessed")
    [tool] = tool_messages(model_server.requests_for(name)[1].body)
    assert tool["content"] == (
        "ERROR: the client did not answer the file_read query (src/main.rs) within 3600 s"
    )
    events = [(e.event, e.data) for e in trace.entries]
    assert ("ClientQueryTimedOut", "q1") in events
    assert ("ClientQueryDone", "WaitingForClient -> Acting") in events
