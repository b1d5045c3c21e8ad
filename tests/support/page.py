"""What the page's tests (tests/ui) share: opening a run's page, and checking that what is on
the screen fits it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from playwright.async_api import Page, expect

Shot = Callable[[Page, str], Awaitable[None]]
"""The ``screenshot`` fixture: ``await screenshot(page, name)`` (docs/ui-*.png)."""


async def open_run(page: Page, ui: str, workflow_id: str) -> None:
    await page.goto(f"{ui}/runs/{workflow_id}")
    await expect(page.locator("#run-id")).to_have_text(workflow_id)


async def fits(page: Page) -> None:
    """Nothing on the page needs sideways scrolling (a phone's screen is as wide as it gets)."""
    overflow = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    wide = await page.evaluate(_WIDE)
    assert overflow <= 0, f"the page is {overflow} px wider than the screen: {wide}"


_WIDE = """() => [...document.querySelectorAll("body *")]
  .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
  .slice(0, 5).map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""


def state(page: Page) -> Any:
    return page.locator("#state .badge")


def is_phone(page: Page) -> bool:
    size = page.viewport_size
    return size is not None and size["width"] < 600
