"""The runs list in a real browser when its answers are slow or come out of order: one refresh
at a time (the list can take seconds: it asks each running run its state), and an answer a
newer refresh superseded (the filter changed meanwhile) never replaces the chosen filter's rows.

The page's requests for the list are answered by the test (Playwright's routing), so it decides
which answer arrives when; everything else is the real page on the real app."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[test]')")
from playwright.async_api import Page, Request, Route, expect

REFRESH_SECONDS = 5
"""How often the list refreshes (``runs.js``'s ``EVERY_MS``)."""


def listing(run_id: str) -> dict[str, Any]:
    return {
        "runs": [
            {
                "id": run_id,
                "state": "Done",
                "execution": "completed",
                "step": 3,
                "model": "openai:scripted",
                "started": "2026-11-27T10:00:00+00:00",
                "closed": "2026-11-27T10:01:00+00:00",
                "task": f"the task of {run_id}",
                "thread": False,
                "last": None,
                "waiting_for": None,
                "answered": False,
            }
        ]
    }


async def until(condition: Any, what: str) -> None:
    """Wait for ``condition()`` (a watchdog sized for a busy machine, not a target)."""
    for _ in range(600):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


async def test_the_list_refreshes_one_at_a_time_and_draws_only_the_newest_answer(
    ui: str, page: Page
) -> None:
    asked: list[str] = []
    held: list[Route] = []

    async def answer(route: Route) -> None:
        asked.append(route.request.url)
        if len(asked) == 1:
            held.append(route)  # the first list, unfiltered: answered late, below
            return
        await route.fulfill(json=listing("fresh-row"))

    await page.route("**/api/runs*", answer)
    await page.goto(ui)
    await until(lambda: held, "the page asked for the list")

    # Longer than the refresh period with the first list unanswered: no second request.
    await asyncio.sleep(REFRESH_SECONDS + 1)
    assert len(asked) == 1, asked

    # The filter changes: its list answers and is drawn.
    await page.select_option("#filter", "done")
    runs = page.locator("#runs")
    await expect(runs).to_contain_text("fresh-row")
    assert asked[1].endswith("/api/runs?state=done"), asked

    # Now the first, unfiltered list answers: superseded, it is not drawn.
    def is_first(request: Request) -> bool:
        return request.url == asked[0]

    async with page.expect_event("requestfinished", predicate=is_first):
        await held[0].fulfill(json=listing("stale-row"))
    await page.evaluate("() => new Promise((done) => setTimeout(done, 200))")  # let it settle
    shown = await runs.inner_text()  # read once: ``expect`` would wait for the next refresh
    assert "fresh-row" in shown and "stale-row" not in shown, shown

    # The refreshes go on, for the chosen filter.
    await until(lambda: len(asked) >= 3, "the list refreshed again")
    assert asked[2].endswith("/api/runs?state=done"), asked
