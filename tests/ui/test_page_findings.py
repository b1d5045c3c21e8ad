"""What issue 40 found on the page, in a real browser on a phone and on a desktop: a write's
content is shown as text with its lines (never an escaped JSON string), the runs list starts on
a phone's first screen with the start form one tap away, a parent whose sub-agent works or waits
says so with a link to it, and a reply the run refused is shown as refused, not as the agent's
answer."""

from __future__ import annotations

import pytest

from tests.support.family import delegate
from tests.support.harness import Harness

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[test]')")
from playwright.async_api import Page, expect

from tests.support.page import Shot, fits, is_phone, open_run, state

CONTENT = "# Notes\n\nline one\nline two\n"
WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": CONTENT}}


async def test_a_writes_content_is_shown_as_text_with_its_lines(
    harness: Harness, ui: str, screen: Page, screenshot: Shot
) -> None:
    """The approval card shows the file's path and its content as the file's text (its lines,
    no `\\n`); so does the tool call's unfolded arguments once it ran."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Written."})
    handle = await harness.start(model, "Write notes.md.", require_approval=["write_file"])
    await open_run(screen, ui, handle.id)
    card = screen.locator("#cards .card")
    content = card.locator('.arguments dd[data-arg="content"] pre')
    await expect(content).to_be_visible()
    assert (await content.inner_text()).rstrip("\n") == CONTENT.rstrip("\n")
    await expect(card.locator('.arguments dd[data-arg="path"]')).to_have_text("notes.md")
    await expect(card.locator(".arguments")).not_to_contain_text("\\n")
    await fits(screen)
    if is_phone(screen):
        await screenshot(screen, "ui-phone-write")

    await card.get_by_role("button", name="Approve").click()
    await expect(state(screen)).to_have_text("Done")
    tool = screen.locator(".block-tool")
    await tool.get_by_text("arguments and result").click()
    shown = tool.locator('.arguments dd[data-arg="content"] pre')
    await expect(shown).to_be_visible()
    assert "line one\nline two" in await shown.inner_text()
    await expect(tool.locator(".arguments")).not_to_contain_text("\\n")
    await fits(screen)


async def test_the_runs_list_starts_on_the_first_screen_and_the_form_is_a_tap_away(
    harness: Harness, ui: str, screen: Page, screenshot: Shot
) -> None:
    """On a phone the start form is one line, so the runs (the one waiting for you among
    them) start on the first screen; a tap opens the form, whose Start button is reachable.
    On a desktop the form is open above the list. Nothing scrolls sideways."""
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Written."})
    handle = await harness.start(model, "Write notes.md.", require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    await screen.goto(ui)
    await screen.get_by_label("Show").select_option("WaitingForHuman")
    row = screen.locator(".run", has_text=handle.id)
    await expect(row).to_contain_text("Waiting for a person")
    await expect(screen.locator("#list-title")).to_be_in_viewport()
    task = screen.get_by_label("Task, or a thread's first message")
    if is_phone(screen):
        await expect(task).to_be_hidden()
        await expect(screen.locator("#runs .run").first).to_be_in_viewport()
        await screenshot(screen, "ui-runs-phone")
        await screen.get_by_text("Start a run or a thread").click()
    await expect(task).to_be_visible()
    start = screen.get_by_role("button", name="Start", exact=True)
    await start.scroll_into_view_if_needed()
    await expect(start).to_be_in_viewport()
    await fits(screen)


async def test_a_parent_waiting_for_its_sub_agent_says_so_with_a_link(
    harness: Harness, ui: str, screen: Page, screenshot: Shot
) -> None:
    """A parent whose sub-agent waits for an approval is `Acting`, and its page says it waits
    for its sub-agent, naming the sub-agent's state, with a link to the sub-agent's page; the
    runs list says so too."""
    sub = harness.script(
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}, {"content": "listed"}
    )
    parent = harness.script({"tool_calls": [delegate("list", sub, "call_1")]}, {"content": "done"})
    handle = await harness.start(
        parent, "Have it listed.", require_approval=["list_dir"], subagents={"models": [sub]}
    )
    await open_run(screen, ui, handle.id)
    waits = screen.locator("#waits-on")
    await expect(waits).to_contain_text("Waiting for its sub-agent:")
    await expect(waits).to_contain_text("(WaitingForHuman: it waits for a person)")
    await expect(state(screen)).to_have_text("Acting")
    link = waits.get_by_role("link")
    child_id = (await link.inner_text()).strip()
    assert child_id and child_id != handle.id
    await fits(screen)
    if not is_phone(screen):
        await screenshot(screen, "ui-subagent")

    await screen.goto(ui)
    row = screen.locator(".run").filter(has=screen.get_by_role("link", name=handle.id, exact=True))
    await expect(row).to_contain_text(f"Waiting for its sub-agent {child_id}")
    await row.get_by_role("link", name=child_id, exact=True).click()
    await expect(screen.locator("#run-id")).to_have_text(child_id)
    await expect(state(screen)).to_have_text("WaitingForHuman")

    await open_run(screen, ui, handle.id)
    await screen.locator("#cards .card").get_by_role("button", name="Approve").click()
    await expect(state(screen)).to_have_text("Done")
    await expect(waits).to_be_hidden()


async def test_a_refused_reply_is_shown_as_refused_not_as_the_answer(
    harness: Harness, ui: str, screen: Page
) -> None:
    """A reply shorter than the run's `min_answer_length` is refused by the run: its block
    says "refused reply", why, and what the run told the model; the answer the run took is
    the agent's."""
    answer = "The build is green on main, and the release notes are ready."
    model = harness.script({"content": "ok"}, {"content": answer})
    handle = await harness.start(model, "How is the build?", min_answer_length=20)
    await open_run(screen, ui, handle.id)
    await expect(state(screen)).to_have_text("Done")
    replies = screen.locator(".block-model")
    await expect(replies).to_have_count(2)
    refused = replies.first
    await expect(refused.locator(".who")).to_have_text("refused reply")
    await expect(refused.locator(".text")).to_have_text("ok")
    await expect(refused.locator(".refusal")).to_contain_text("Not taken as the answer")
    await expect(refused.locator(".refusal-note")).to_contain_text(
        "The run told the model: “Your answer was 2 characters; the final answer must be at "
        "least 20."
    )
    await expect(replies.last.locator(".who")).to_have_text("agent")
    await expect(replies.last.locator(".text")).to_have_text(answer)
    await fits(screen)

    await screen.reload()  # the snapshot says it too, not only the live ops
    await expect(replies.first.locator(".who")).to_have_text("refused reply")
    await expect(replies.last.locator(".who")).to_have_text("agent")
