"""A conversation's controls in a real browser, on a phone and on a desktop: a message sent
while a turn runs follows the mode picked (reject is refused with the run's reason, steer joins
the turn, queue waits behind it, each said as the API answered it), and a fork started from a
step of the trace opens on a page that shows where it came from."""

from __future__ import annotations

import re

import pytest

from tests.support.harness import Harness
from tests.support.threads import start_thread

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[test]')")
from playwright.async_api import Page, expect

from tests.support.page import Shot, fits, is_phone, open_run, state

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}


async def send(page: Page, text: str, mode: str) -> None:
    await page.get_by_label("Your next message").fill(text)
    await page.get_by_label("If a turn is running").select_option(mode)
    await page.get_by_role("button", name="Send", exact=True).click()


async def test_a_message_mid_turn_follows_the_mode_picked(
    harness: Harness, ui: str, screen: Page, screenshot: Shot
) -> None:
    """While a thread's turn waits for an approval: `reject` is not sent and the page shows the
    run's reason; `steer` says it joins the turn, and the turn's next model call reads it;
    `queue` says it is next, and it is answered after the turn."""
    model = harness.script(
        {"content": "Hello."},
        {"tool_calls": [WRITE]},
        {"content": "Written, tests too."},
        {"content": "The queued one, answered."},
    )
    thread = await start_thread(harness, model, task="Hi.", require_approval=["write_file"])
    await open_run(screen, ui, thread.id)
    await expect(state(screen)).to_have_text("WaitingForUserInput")
    result = screen.locator("#send-result")
    error = screen.locator("#send-error")

    await send(screen, "Write notes.md.", "")
    await expect(result).to_have_text("Sent: it starts a turn.")
    await expect(state(screen)).to_have_text("WaitingForHuman")

    await send(screen, "Right now!", "reject")
    await expect(error).to_contain_text("Not sent: refused: the thread is busy")
    await expect(result).to_be_empty()
    await expect(screen.get_by_label("Your next message")).to_have_value("Right now!")

    await send(screen, "Also the tests.", "steer")
    await expect(result).to_contain_text("Steered: it joins the running turn")
    await expect(error).to_be_hidden()
    await send(screen, "And then the docs.", "queue")
    await expect(result).to_have_text("Queued: answered after the running turn (next).")
    await fits(screen)
    if not is_phone(screen):
        await screenshot(screen, "ui-mid-turn")

    await screen.locator("#cards .card").get_by_role("button", name="Approve").click()
    await expect(screen.locator(".block-model .text").last).to_have_text(
        "The queued one, answered."
    )
    await expect(state(screen)).to_have_text("WaitingForUserInput")
    requests = harness.requests(model)
    steered = [m["content"] for m in requests[2]["messages"] if m["role"] == "user"]
    assert "Also the tests." in steered[-1] and "Right now!" not in str(steered), steered
    assert requests[3]["messages"][-1] == {"role": "user", "content": "And then the docs."}


async def test_a_fork_from_a_step_of_the_trace_opens_with_its_lineage(
    harness: Harness, ui: str, screen: Page, screenshot: Shot
) -> None:
    """The trace lists the run's steps, each with "Fork from here"; a fork from step 2 with a
    new instruction opens the fork's page, which names the original (a link) and the step; the
    fork's first model call reads the original's conversation to step 2 and the instruction."""
    writes = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": f"f{n}.txt", "content": "x"}}]}
        for n in (1, 2, 3)
    ]
    model = harness.script(*writes, {"content": "done"})
    handle = await harness.start(model, "Write three files.", snapshots={"enabled": True})
    await open_run(screen, ui, handle.id)
    await expect(state(screen)).to_have_text("Done")

    await screen.get_by_text("Trace, and a fork from any step").click()
    step = screen.locator('.step[data-step="2"]')
    await expect(step.locator("h3")).to_have_text("Step 2")
    await expect(step.locator(".entries")).to_contain_text("ModelResponse")
    await fits(screen)
    await step.get_by_role("button", name="Fork from step 2").click()
    await step.get_by_label("new message for the fork from step 2").fill("Write f9.txt instead.")
    if not is_phone(screen):
        await screenshot(screen, "ui-fork")
    await step.get_by_role("button", name="Start the fork").click()

    await expect(screen).not_to_have_url(re.compile(re.escape(handle.id) + "$"))
    fork_id = screen.url.rsplit("/", 1)[1]
    harness.handles.append(harness.client.get_workflow_handle(fork_id))
    await expect(screen.locator("#run-id")).to_have_text(fork_id)
    origin = screen.locator("[data-fact='Forked from']")
    await expect(origin).to_have_text(f"{handle.id} at step 2")
    await expect(origin.get_by_role("link")).to_have_attribute("href", f"/runs/{handle.id}")
    await expect(state(screen)).to_have_text("Done")
    await fits(screen)
    first_of_fork = harness.requests(model)[4]
    assert first_of_fork["messages"][:-1] == harness.requests(model)[2]["messages"]
    assert first_of_fork["messages"][-1] == {"role": "user", "content": "Write f9.txt instead."}

    await origin.get_by_role("link").click()
    await expect(screen.locator("#run-id")).to_have_text(handle.id)


async def test_an_interrupt_picked_on_the_page_stops_the_turn_and_starts_it_again(
    harness: Harness, ui: str, screen: Page
) -> None:
    """`interrupt` while the turn's write waits for approval: the page says the turn is
    interrupted, the write never runs (its card is settled), and the step is made again with
    the message read, whose answer the page shows."""
    model = harness.script(
        {"content": "Hello."}, {"tool_calls": [WRITE]}, {"content": "Stopped; nothing written."}
    )
    thread = await start_thread(harness, model, task="Hi.", require_approval=["write_file"])
    await open_run(screen, ui, thread.id)
    await expect(state(screen)).to_have_text("WaitingForUserInput")
    await send(screen, "Write notes.md.", "queue")
    await expect(screen.locator("#cards .card h2")).to_have_text("Approve write_file?")

    await send(screen, "Stop, wrong file.", "interrupt")
    await expect(screen.locator("#send-result")).to_contain_text("Interrupting: the running")
    await expect(screen.locator(".block-model .text").last).to_have_text(
        "Stopped; nothing written."
    )
    await expect(screen.locator("#cards .card")).to_have_class(re.compile("settled"))
    await expect(state(screen)).to_have_text("WaitingForUserInput")
    await fits(screen)
    assert not (harness.workspace / "notes.md").exists()
    last = harness.requests(model)[-1]["messages"]
    assert any(m["role"] == "user" and "Stop, wrong file." in m["content"] for m in last), last
