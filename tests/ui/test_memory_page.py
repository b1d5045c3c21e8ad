"""The memory page in a real browser, on a phone and on a desktop: a namespace's items listed
(what a run remembered among them), one added, edited and forgotten by hand, and what the page
did is what the client and the runs read."""

from __future__ import annotations

import uuid

import pytest

from tests.support.harness import Harness
from treadle.client import AgentClient

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[test]')")
from playwright.async_api import Page, expect

from tests.support.page import Shot, fits, is_phone, state

DEPLOY = "The team deploys on Fridays, with pnpm."


async def test_a_namespace_is_read_added_to_edited_and_forgotten_on_the_page(
    harness: Harness, ui: str, screen: Page, screenshot: Shot
) -> None:
    """What a run remembered is listed under its namespace (reached from the run's page,
    which names it); an item added on the page joins it; Edit and Save replace its text; Forget
    removes it; the client reads each change."""
    namespace = f"user:alice/agent:{uuid.uuid4().hex[:8]}"
    remember = {"tool_calls": [{"name": "remember", "arguments": {"text": DEPLOY}}]}
    model = harness.script(remember, {"content": "Noted."})
    handle = await harness.start(model, "Remember how we deploy.", memory={"namespace": namespace})
    await screen.goto(f"{ui}/runs/{handle.id}")
    await expect(state(screen)).to_have_text("Done")

    await screen.locator("[data-fact=Memory]").get_by_role("link", name=namespace).click()
    await expect(screen.get_by_label("Namespace")).to_have_value(namespace)
    items = screen.locator("#items .item")
    await expect(items).to_have_count(1)
    await expect(items.first.locator(".text")).to_have_text(DEPLOY)
    await expect(items.first.locator(".meta")).to_contain_text(f"m1 · by {handle.id}")

    await screen.get_by_label("Remember").fill("Customers are in CET.")
    await screen.get_by_role("button", name="Remember").click()
    await expect(screen.locator("#memory-note")).to_have_text("Remembered m2.")
    await expect(items).to_have_count(2)
    added = screen.locator('.item[data-id="m2"]')
    await expect(added.locator(".text")).to_have_text("Customers are in CET.")
    await fits(screen)
    if is_phone(screen):
        await screenshot(screen, "ui-memory-phone")

    await added.get_by_role("button", name="Edit m2").click()
    await added.get_by_label("new text of m2").fill("Customers are in CEST.")
    await added.get_by_role("button", name="Save").click()
    await expect(screen.locator("#memory-note")).to_have_text("Saved m2.")
    await expect(screen.locator('.item[data-id="m2"] .text')).to_have_text("Customers are in CEST.")

    await screen.locator('.item[data-id="m1"]').get_by_role("button", name="Forget m1").click()
    await expect(screen.locator("#memory-note")).to_have_text("Forgot m1.")
    await expect(items).to_have_count(1)
    client = AgentClient(harness.client, task_queue=harness.task_queue)
    assert [(i.id, i.text) for i in await client.memory_items(namespace)] == [
        ("m2", "Customers are in CEST.")
    ]

    await screen.reload()  # the namespace is in the address
    await expect(screen.get_by_label("Namespace")).to_have_value(namespace)
    await expect(items).to_have_count(1)
    await fits(screen)


async def test_a_bad_namespace_and_a_gone_item_are_said_on_the_page(
    harness: Harness, ui: str, screen: Page
) -> None:
    """A namespace outside the pattern is refused with the API's reason; an item forgotten
    elsewhere while the page showed it is refused on its own row, saying so."""
    await screen.goto(ui)
    await screen.get_by_role("link", name="Memory").click()
    await screen.get_by_label("Namespace").fill("has spaces")
    await screen.get_by_role("button", name="Show").click()
    await expect(screen.locator("#memory-error")).to_contain_text("namespace")

    namespace = f"acme/support-{uuid.uuid4().hex[:8]}"
    client = AgentClient(harness.client, task_queue=harness.task_queue)
    await client.remember(namespace, "Tickets close after 7 days.")
    await screen.goto(f"{ui}/memory?namespace={namespace}")
    row = screen.locator('.item[data-id="m1"]')
    await expect(row.locator(".text")).to_have_text("Tickets close after 7 days.")
    await client.forget(namespace, "m1")
    await row.get_by_role("button", name="Forget m1").click()
    await expect(row.locator(".error")).to_contain_text("no item 'm1'")
