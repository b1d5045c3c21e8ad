"""The page in a real browser, as a person uses it: a thread started from the list answers in
the conversation as its text streams; a write waiting for approval is approved, rejected or
modified right on its card; a client query is answered; a reload mid-reply shows no text twice;
two pages on one run agree on who decided a call."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.support.harness import Harness, tool_messages
from treadle.workflows.agent.messages.models import AgentInput
from treadle.workflows.agent.workflow import AgentWorkflow

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[test]')")
from playwright.async_api import Browser, BrowserContext, Page, expect

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}
Shot = Callable[[Page, str], Awaitable[None]]


def words(count: int) -> str:
    return " ".join(f"word{i}" for i in range(count)) + "."


async def open_run(page: Page, ui: str, workflow_id: str) -> None:
    await page.goto(f"{ui}/runs/{workflow_id}")
    await expect(page.locator("#run-id")).to_have_text(workflow_id)


async def waiting_write(harness: Harness, after: dict[str, Any]) -> tuple[str, Any]:
    model = harness.script({"content": "I'll write it.", "tool_calls": [WRITE]}, after)
    handle = await harness.start(model, "Write notes.md.", require_approval=["write_file"])
    return model, handle


def state(page: Page) -> Any:
    return page.locator("#state .badge")


def card(page: Page) -> Any:
    return page.locator("#cards .card")


async def test_a_thread_started_from_the_page_streams_its_answer_and_takes_the_next_message(
    harness: Harness, ui: str, page: Page, screenshot: Shot
) -> None:
    """The start form starts a thread; its answer appears as the model writes it; the next
    message goes from the box, its answer follows; the list shows the thread waiting for its
    user, by that filter; closing ends it."""
    first = words(40)
    model = harness.script(
        {"content": first, "chunk_delay": 0.02}, {"content": "The second answer."}
    )
    await page.goto(ui)
    await page.get_by_label("Task, or a thread's first message").fill("Say many words.")
    await page.get_by_label("Model").fill(model)
    await page.get_by_label("Workspace").fill(str(harness.workspace))
    await page.get_by_role("button", name="Start").click()
    await expect(page).to_have_url(re.compile(r"/runs/thread-"))
    thread_id = page.url.rsplit("/", 1)[1]
    harness.handles.append(harness.client.get_workflow_handle(thread_id))

    answer = page.locator(".block-model .text")
    await expect(answer.first).to_have_text(first)
    await expect(state(page)).to_have_text("WaitingForUserInput")
    await expect(page.locator(".block-user").first).to_contain_text("Say many words.")
    await screenshot(page, "ui-thread")

    await page.get_by_label("Your next message").fill("And then?")
    await page.get_by_role("button", name="Send").click()
    await expect(answer.nth(1)).to_have_text("The second answer.")
    await expect(page.locator(".block-user").nth(1)).to_contain_text("And then?")

    listing = await page.context.new_page()
    await listing.goto(ui)
    await listing.get_by_label("Show").select_option("WaitingForUserInput")
    row = listing.locator(".run", has_text=thread_id)
    await expect(row.locator(".badge")).to_have_text("WaitingForUserInput")
    await expect(row).to_contain_text("Waiting for its user: the next message")
    await screenshot(listing, "ui-runs")

    await page.get_by_role("button", name="Close the thread").click()
    await expect(state(page)).to_have_text("Done")


async def test_approving_a_write_by_clicking_runs_the_tool(
    harness: Harness, ui: str, page: Page, screenshot: Shot
) -> None:
    """A write waiting for approval is a card with its arguments; Approve runs it: the tool's
    line says done, the file is written, the run answers."""
    _, handle = await waiting_write(harness, {"content": "Written."})
    await open_run(page, ui, handle.id)
    await expect(card(page).locator("h2")).to_have_text("Approve write_file?")
    await expect(card(page).locator('.arguments dd[data-arg="content"]')).to_have_text("hello")
    await expect(state(page)).to_have_text("WaitingForHuman")
    await screenshot(page, "ui-approval")

    await card(page).get_by_role("button", name="Approve").click()
    await expect(card(page)).to_contain_text("Approved by you")
    await expect(page.locator(".block-tool .outcome")).to_contain_text("done:")
    await expect(state(page)).to_have_text("Done")
    await expect(page.locator(".block-model .text").last).to_have_text("Written.")
    tool = page.locator(".block-tool")
    await tool.get_by_text("arguments and result").click()
    await expect(tool.locator('.arguments dd[data-arg="path"]')).to_have_text("notes.md")
    await expect(tool.locator("pre.result")).to_contain_text("notes.md")
    assert (harness.workspace / "notes.md").read_text() == "hello"


async def test_rejecting_needs_a_reason_and_the_model_reads_it(
    harness: Harness, ui: str, page: Page
) -> None:
    """Reject without a reason is refused on the card; with one, the call never runs and the
    model's next request carries the reason."""
    model, handle = await waiting_write(harness, {"content": "Understood."})
    await open_run(page, ui, handle.id)
    reject = card(page).get_by_role("button", name="Reject")
    await reject.click()
    await expect(card(page).locator(".error")).to_contain_text("needs a reason")

    await card(page).get_by_label("reason for rejecting").fill("not in this repository")
    await reject.click()
    await expect(card(page)).to_contain_text("Rejected by you")
    await expect(state(page)).to_have_text("Done")
    assert not (harness.workspace / "notes.md").exists()
    observation = tool_messages(harness.requests(model)[-1])[0]["content"]
    assert "not in this repository" in observation


async def test_modify_refuses_bad_arguments_in_place_then_runs_the_new_ones(
    harness: Harness, ui: str, page: Page
) -> None:
    """Modify: text that is not JSON, and JSON the tool's schema refuses, are refused on the
    card (nothing sent); valid arguments run the call with them."""
    _, handle = await waiting_write(harness, {"content": "Written elsewhere."})
    await open_run(page, ui, handle.id)
    await card(page).get_by_role("button", name="Modify…").click()
    editor = card(page).get_by_label("new arguments as JSON")
    send = card(page).get_by_role("button", name="Send the new arguments")
    error = card(page).locator(".error")

    await editor.fill('{"path": "other.md", "content": ')
    await send.click()
    await expect(error).to_contain_text("Not valid JSON")
    await editor.fill('{"path": "other.md"}')
    await send.click()
    await expect(error).to_contain_text("Missing: content")
    await editor.fill('{"path": ["other.md"], "content": "x"}')
    await send.click()
    await expect(error).to_contain_text("do not match its schema")
    await expect(state(page)).to_have_text("WaitingForHuman")

    await editor.fill(json.dumps({"path": "other.md", "content": "changed"}))
    await send.click()
    await expect(card(page)).to_contain_text("Modified by you")
    await expect(state(page)).to_have_text("Done")
    assert (harness.workspace / "other.md").read_text() == "changed"
    assert not (harness.workspace / "notes.md").exists()


async def test_a_client_query_is_answered_on_its_card(
    harness: Harness, ui: str, page: Page, screenshot: Shot
) -> None:
    """A question the run asks its client is a card; the answer typed there reaches the model."""
    ask = {"name": "ask_client", "arguments": {"kind": "question", "what": "Which branch?"}}
    model = harness.script({"tool_calls": [ask]}, {"content": "Using main."})
    handle = await harness.start(model, "Ask which branch.")
    await open_run(page, ui, handle.id)
    await expect(card(page).locator(".question")).to_have_text("Which branch?")
    await expect(state(page)).to_have_text("WaitingForClient")
    await screenshot(page, "ui-client-query")

    await card(page).get_by_label("your answer").fill("main, always")
    await card(page).get_by_role("button", name="Answer").click()
    await expect(card(page)).to_contain_text("Answered by you")
    await expect(state(page)).to_have_text("Done")
    assert "main, always" in tool_messages(harness.requests(model)[-1])[0]["content"]


async def test_a_reload_mid_reply_shows_no_text_twice(
    harness: Harness, ui: str, page: Page
) -> None:
    """Reloaded while the model is still writing, the page shows what was written once and
    goes on from there: one reply, exactly its text."""
    text = words(120)
    model = harness.script({"content": text, "chunk_delay": 0.03})
    handle = await harness.start(model, "Say many words.")
    await open_run(page, ui, handle.id)
    reply = page.locator(".block-model .text")
    await expect(reply).to_contain_text("word3 ")
    await page.reload()
    await expect(state(page)).to_have_text("Done")
    await expect(reply).to_have_count(1)
    await expect(reply).to_have_text(text)


async def test_two_pages_deciding_one_call_one_wins_the_other_is_told(
    harness: Harness, ui: str, page: Page, context: BrowserContext
) -> None:
    """Two pages show the same waiting call; both click at once: exactly one decision is
    taken, and the other page says the call was decided elsewhere."""
    _, handle = await waiting_write(harness, {"content": "Written."})
    other = await context.new_page()
    await open_run(page, ui, handle.id)
    await open_run(other, ui, handle.id)
    await expect(card(page).locator("h2")).to_have_text("Approve write_file?")
    await expect(card(other).locator("h2")).to_have_text("Approve write_file?")
    await card(other).get_by_label("reason for rejecting").fill("no")

    # Both clicked at once (a click that waited for its button would find it gone once the
    # other page's decision reached this one: that page is told, and has nothing to click).
    await asyncio.gather(
        card(page).get_by_role("button", name="Approve").evaluate("button => button.click()"),
        card(other).get_by_role("button", name="Reject").evaluate("button => button.click()"),
    )
    settled = re.compile("by you|Decided elsewhere")
    await expect(card(page)).to_have_text(settled)
    await expect(card(other)).to_have_text(settled)
    outcomes = sorted([await card(page).inner_text(), await card(other).inner_text()])
    assert ["Decided elsewhere" in o for o in outcomes].count(True) == 1, outcomes
    assert ["by you" in o for o in outcomes].count(True) == 1, outcomes
    await expect(state(page)).to_have_text("Done")
    await expect(state(other)).to_have_text("Done")


async def test_a_stuck_run_asks_for_guidance_on_a_card(
    harness: Harness, ui: str, page: Page
) -> None:
    """A run stuck on the same failing call (recovery ask_human) is a card saying why; the
    guidance typed there reaches the model and the run goes on."""
    (harness.workspace / "main.go").write_text("package main\n")
    bad = {
        "name": "edit_file",
        "arguments": {"path": "main.go", "old_text": "func missing()", "new_text": "x"},
    }
    model = harness.script(
        {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"tool_calls": [bad]}, {"content": "ok"}
    )
    handle = await harness.start(model, "Fix main.go.", recovery="ask_human")
    await open_run(page, ui, handle.id)
    await expect(card(page).locator("h2")).to_have_text("The run is stuck and asks for guidance")
    await expect(page.locator("[data-fact=Stuck]")).not_to_be_empty()
    await card(page).get_by_label("guidance for the model").fill("there is no such function")
    await card(page).get_by_role("button", name="Guide").click()
    await expect(card(page)).to_contain_text("Guidance sent by you")
    await expect(state(page)).to_have_text("Done")
    last = harness.requests(model)[-1]["messages"][-1]
    assert last["content"] == "Guidance from a human: there is no such function"


async def test_on_a_phone_sized_screen_the_keyboard_alone_approves(
    harness: Harness, ui: str, browser: Browser, screenshot: Shot
) -> None:
    """At 390 px nothing needs sideways scrolling, the state is a word, and tabbing from the
    top reaches Approve, which Enter presses."""
    _, handle = await waiting_write(harness, {"content": "Written."})
    phone = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = await phone.new_page()
        await open_run(page, ui, handle.id)
        approve = card(page).get_by_role("button", name="Approve")
        await expect(approve).to_be_visible()
        await expect(state(page)).to_have_text("WaitingForHuman")
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
        await screenshot(page, "ui-phone")
        for _ in range(30):
            await page.keyboard.press("Tab")
            if await approve.evaluate("button => button === document.activeElement"):
                break
        await expect(approve).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(card(page)).to_contain_text("Approved by you")
        await expect(state(page)).to_have_text("Done")
    finally:
        await phone.close()


async def test_a_run_no_worker_answers_for_says_so(harness: Harness, ui: str, page: Page) -> None:
    """A run whose worker is gone: the page says it waits for a worker, instead of an empty
    conversation that looks finished."""
    handle = await harness.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(task="Nobody runs this.", model="openai:none", workspace=str(harness.workspace)),
        id=f"ui-orphan-{uuid.uuid4().hex[:8]}",
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )
    try:
        await open_run(page, ui, handle.id)
        # Three queries wait out their 5 s timeout one after another before the page can say
        # so (status, transcript, stream): a watchdog sized for a busy machine, not a target.
        unanswered = 120_000
        await expect(page.locator("#stream-note")).to_contain_text(
            "waiting for a worker", timeout=unanswered
        )
        await expect(page.locator("#status")).to_contain_text(
            "is a worker running?", timeout=unanswered
        )
    finally:
        await handle.terminate("the test is over")
