"""Runs and threads over HTTP: started, found in the list, read (status, view, trace, result,
export), decided (approve, reject, modify), answered, woken, sent messages, closed and
cancelled, each through its route; refusals come back as JSON with the run's own reason."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from tests.support.harness import Harness, tool_messages
from tests.support.http_api import run_body, started, until_state

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "over http"}}


async def test_a_run_is_started_approved_and_read_over_http(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """POST /v1/runs starts it; its status shows the call waiting; approve runs it; result,
    trace, export and the list say it is done."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Notes written."})
    body = run_body(harness, model, config={"require_approval": ["write_file"]})
    run_id = await started(http, body, track)
    status = await until_state(http, run_id, "WaitingForHuman")
    (pending,) = status["pending_approvals"]
    assert pending["tool"] == "write_file"
    view = (await http.get(f"/v1/runs/{run_id}/view")).json()
    assert "write_file" in view["schemas"]
    early = await http.get(f"/v1/runs/{run_id}/result")
    assert early.status_code == 409 and "no result" in early.json()["error"]

    approved = await http.post(
        f"/v1/runs/{run_id}/approve", json={"call_id": pending["call_id"], "decided_by": "ana"}
    )
    assert approved.json() == {"done": "approved", "call_id": pending["call_id"],
                               "tool": "write_file"}  # fmt: skip
    await until_state(http, run_id, "Done")
    result = (await http.get(f"/v1/runs/{run_id}/result")).json()
    assert result["answer"] == "Notes written."
    assert (harness.workspace / "notes.md").read_text() == "over http"
    trace = (await http.get(f"/v1/runs/{run_id}/trace")).json()
    assert any(e["event"] == "HumanApproved" for e in trace["entries"]), trace
    export = (await http.get(f"/v1/runs/{run_id}/export")).json()
    assert any(m.get("content") == "Notes written." for m in export["conversation"]["messages"])
    for _ in range(100):  # visibility is eventually consistent
        listed = (await http.get("/v1/runs", params={"state": "done", "limit": 500})).json()
        if run_id in [r["id"] for r in listed["runs"]]:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"{run_id} never listed as done")
    assert "WaitingForHuman" in listed["filters"]


async def test_reject_and_modify_go_to_the_run_and_its_refusals_come_back(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """A rejection without a reason is a 400 naming the field; the run's own refusal (an
    unknown call id) is a 409 with its reason; modify runs the call with the new arguments and
    reject feeds the model the reason."""
    second = {"name": "write_file", "arguments": {"path": "b.md", "content": "b"}}
    model = harness.script({"tool_calls": [WRITE]}, {"tool_calls": [second]}, {"content": "ok"})
    body = run_body(harness, model, config={"require_approval": ["write_file"]})
    run_id = await started(http, body, track)
    await until_state(http, run_id, "WaitingForHuman")

    no_reason = await http.post(f"/v1/runs/{run_id}/reject", json={})
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["error"]
    unknown = await http.post(f"/v1/runs/{run_id}/approve", json={"call_id": "call_nope"})
    assert unknown.status_code == 409
    assert unknown.json()["error"].startswith("the run refused it:")
    typo = await http.post(f"/v1/runs/{run_id}/approve", json={"cal_id": "x"})
    assert typo.status_code == 400 and "cal_id" in typo.json()["error"]

    new = {"path": "notes.md", "content": "modified"}
    modified = await http.post(
        f"/v1/runs/{run_id}/modify", json={"arguments": new, "tool": "write_file"}
    )
    assert modified.json()["done"] == "modified", modified.text
    await until_state(http, run_id, "WaitingForHuman")  # the second write
    rejected = await http.post(f"/v1/runs/{run_id}/reject", json={"reason": "not b.md"})
    assert rejected.json()["done"] == "rejected"
    await until_state(http, run_id, "Done")
    assert (harness.workspace / "notes.md").read_text() == "modified"
    assert not (harness.workspace / "b.md").exists()
    assert "not b.md" in tool_messages(harness.requests(model)[-1])[-1]["content"]


async def test_a_thread_takes_messages_and_closes_over_http(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """A thread started over HTTP answers, takes the next message, and closes; a message to a
    single-task run is refused with a reason."""
    model = harness.script({"content": "Hello."}, {"content": "Marmalade."})
    run_id = await started(http, run_body(harness, model, "Hi.", thread=True), track)
    await until_state(http, run_id, "WaitingForUserInput")
    sent = await http.post(f"/v1/runs/{run_id}/messages", json={"text": "The word?"})
    assert sent.status_code == 202 and sent.json()["position"] >= 1
    for _ in range(600):
        status = (await http.get(f"/v1/runs/{run_id}")).json()
        if status["state"] == "WaitingForUserInput" and status.get("final_answer") == "Marmalade.":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the second answer never came")
    closing = await http.post(f"/v1/runs/{run_id}/close", json={})
    assert closing.status_code == 202 and closing.json()["done"] == "closing"
    await until_state(http, run_id, "Done")

    single = harness.script({"content": "once"})
    once = await started(http, run_body(harness, single), track)
    await until_state(http, once, "Done")
    refused = await http.post(f"/v1/runs/{once}/messages", json={"text": "again"})
    assert refused.status_code == 409 and refused.json()["error"]


async def test_a_message_mid_turn_follows_its_mode_over_http(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """While a thread's turn runs, a message with ``mode: reject`` is refused (409, the reason)
    and one with ``mode: steer`` joins the turn: the model's next call reads it."""
    model = harness.script(
        {"content": "Hello."},
        {"delay": 3, "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "Steered."},
    )
    run_id = await started(http, run_body(harness, model, "Hi.", thread=True), track)
    await until_state(http, run_id, "WaitingForUserInput")
    sent = await http.post(f"/v1/runs/{run_id}/messages", json={"text": "Look around."})
    assert sent.status_code == 202 and sent.json()["done"] == "sent"
    for _ in range(600):  # the turn's model call is in flight
        if len(harness.requests(model)) >= 2:
            break
        await asyncio.sleep(0.05)
    refused = await http.post(f"/v1/runs/{run_id}/messages", json={"text": "now", "mode": "reject"})
    assert refused.status_code == 409 and "busy" in refused.json()["error"], refused.text
    steered = await http.post(
        f"/v1/runs/{run_id}/messages", json={"text": "Also the tests.", "mode": "steer"}
    )
    assert steered.status_code == 202 and steered.json()["done"] == "steered", steered.text
    for _ in range(600):
        if len(harness.requests(model)) >= 3:
            break
        await asyncio.sleep(0.05)
    users = [m["content"] for m in harness.requests(model)[2]["messages"] if m["role"] == "user"]
    assert "Also the tests." in users[-1], users
    assert "now" not in users


async def test_a_question_is_answered_and_a_wait_woken_over_http(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """The run's client query is answered by its id; a run parked by the wait tool is woken
    with a reason the model reads."""
    ask = {"name": "ask_client", "arguments": {"kind": "question", "what": "Which branch?"}}
    wait = {"name": "wait", "arguments": {"seconds": 3600, "reason": "CI"}}
    model = harness.script({"tool_calls": [ask]}, {"tool_calls": [wait]}, {"content": "main."})
    run_id = await started(http, run_body(harness, model, "Ask, then wait."), track)
    status = await until_state(http, run_id, "WaitingForClient")
    query_id = status["client_query"]["id"]
    neither = await http.post(f"/v1/runs/{run_id}/answer", json={"query_id": query_id})
    assert neither.status_code == 400
    answered = await http.post(
        f"/v1/runs/{run_id}/answer", json={"query_id": query_id, "content": "main"}
    )
    assert answered.json() == {"done": "answered", "query_id": query_id}
    await until_state(http, run_id, "Waiting")
    woken = await http.post(f"/v1/runs/{run_id}/wake", json={"reason": "the build is green"})
    assert woken.status_code == 200 and woken.json()["run_id"] == run_id
    await until_state(http, run_id, "Done")
    assert "main" in tool_messages(harness.requests(model)[1])[0]["content"]
    assert "the build is green" in tool_messages(harness.requests(model)[2])[-1]["content"]


async def test_a_run_is_cancelled_and_a_missing_or_taken_id_is_said(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """Cancel ends a waiting run as cancelled (a second cancel: it is over, 409); an id that
    names no run is a 404, a taken one a 409, both with a reason."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "never"})
    body = run_body(harness, model, config={"require_approval": ["write_file"]})
    run_id = await started(http, body, track)
    await until_state(http, run_id, "WaitingForHuman")
    cancelled = await http.post(f"/v1/runs/{run_id}/cancel", json={})
    assert cancelled.status_code == 202 and cancelled.json() == {"done": "cancelling"}
    handle = harness.client.get_workflow_handle(run_id)
    for _ in range(600):
        description = await handle.describe()
        if description.close_time is not None:
            break
        await asyncio.sleep(0.05)
    assert description.status is not None and description.status.name == "CANCELED"
    again = await http.post(f"/v1/runs/{run_id}/cancel", json={})
    assert again.status_code == 409 and "over" in again.json()["error"]
    assert not (harness.workspace / "notes.md").exists()

    missing = await http.get("/v1/runs/no-such-run")
    assert missing.status_code == 404 and "no-such-run" in missing.json()["error"]
    taken = await http.post("/v1/runs", json={**body, "id": run_id})
    assert taken.status_code == 409 and run_id in taken.json()["error"]


async def test_a_run_is_forked_over_http(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """``POST /v1/runs/{id}/fork`` from step 2 with a new instruction: a 201 naming the fork and
    its origin, the fork's first model call reads the original's conversation to there and the
    instruction, and it ends; a step past the run's record is a 400 with the reason."""
    writes = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": f"f{n}.txt", "content": "x"}}]}
        for n in (1, 2, 3)
    ]
    model = harness.script(*writes, {"content": "done"})
    body = run_body(harness, model, config={"snapshots": {"enabled": True}})
    run_id = await started(http, body, track)
    await until_state(http, run_id, "Done")
    forked = await http.post(
        f"/v1/runs/{run_id}/fork", json={"step": 2, "message": "Write f9.txt instead."}
    )
    assert forked.status_code == 201, forked.text
    fork = forked.json()
    assert (fork["forked_from"], fork["step"]) == (run_id, 2)
    track(fork["id"])
    await until_state(http, fork["id"], "Done")
    first_of_fork = harness.requests(model)[4]
    assert first_of_fork["messages"][:-1] == harness.requests(model)[2]["messages"]
    assert first_of_fork["messages"][-1] == {"role": "user", "content": "Write f9.txt instead."}
    past = await http.post(f"/v1/runs/{run_id}/fork", json={"step": 99})
    assert past.status_code == 400 and past.json()["error"], past.text
