"""The runs list in a real browser when its answers are slow, out of order or never come: one
request at a time (the list can take seconds: it asks each running run its state), a request a
change of filter superseded is cancelled and its rows never replace the chosen filter's, and a
request with no answer is given up, said, and asked again.

The page's requests for the list are answered by the test (Playwright's routing), so it decides
which answer arrives when, and the page's clock is Playwright's (``page.clock``), so its
refresh period and its give-up pass when the test says; everything else is the real page on
the real app."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

import pytest

pytest.importorskip("playwright", reason="playwright is not installed (pip install -e '.[test]')")
from playwright.async_api import Page, Request, Route, expect

from tests.support.waits import until

EVERY_MS = 5_000
"""How often the list refreshes (``runs.js``)."""
GIVE_UP_MS = 30_000
"""How long the page waits for one list (``runs.js``)."""
START = datetime.datetime(2026, 11, 27, 10, 0, 0, tzinfo=datetime.UTC)


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


async def settled(page: Page) -> None:
    """Let requests the page has just made reach the test (it waits in real time: the page's
    clock is paused), so that counting them afterwards counts them all."""
    await page.evaluate("() => null")
    await asyncio.sleep(0.5)


async def paused_page_holding_the_first_list(page: Page, ui: str) -> tuple[list[str], list[Route]]:
    """The list page loaded with its clock paused, its first list request held unanswered and
    every later one answered with one run, ``fresh-row``: (the URLs asked, the held route)."""
    asked: list[str] = []
    held: list[Route] = []

    async def answer(route: Route) -> None:
        asked.append(route.request.url)
        if len(asked) == 1:
            held.append(route)
            return
        await route.fulfill(json=listing("fresh-row"))

    await page.clock.install(time=START)
    await page.route("**/v1/runs*", answer)
    await page.goto(ui)
    await until(lambda: held, "the page asked for the list")
    await page.clock.pause_at(START + datetime.timedelta(seconds=1))
    return asked, held


async def test_one_list_at_a_time_and_a_change_of_filter_cancels_the_one_it_supersedes(
    ui: str, page: Page
) -> None:
    asked, held = await paused_page_holding_the_first_list(page, ui)

    # Three refresh periods with the first list unanswered: no second request.
    await page.clock.run_for(3 * EVERY_MS)
    await settled(page)
    assert len(asked) == 1, asked

    # The filter changes: the unanswered list is cancelled, the new one answers and is drawn.
    def is_first(request: Request) -> bool:
        return request.url == asked[0]

    async with page.expect_event("requestfailed", predicate=is_first):
        await page.select_option("#filter", "done")
    runs = page.locator("#runs")
    await expect(runs).to_contain_text("fresh-row")
    assert asked[1].endswith("/v1/runs?state=done"), asked

    # Should its answer come anyway, it is not drawn.
    with contextlib.suppress(Exception):  # the page has cancelled it: the route may refuse
        await held[0].fulfill(json=listing("stale-row"))
    await settled(page)
    shown = await runs.inner_text()  # read once: ``expect`` would wait for the next refresh
    assert "fresh-row" in shown and "stale-row" not in shown, shown

    # One period after the answer, the next refresh, for the chosen filter.
    await page.clock.run_for(EVERY_MS)
    await until(lambda: len(asked) >= 3, "the list refreshed again")
    assert asked[2].endswith("/v1/runs?state=done"), asked


async def test_a_list_that_never_answers_is_given_up_said_and_asked_again(
    ui: str, page: Page
) -> None:
    asked, _ = await paused_page_holding_the_first_list(page, ui)
    error = page.locator("#list-error")

    def is_first(request: Request) -> bool:
        return request.url == asked[0]

    async with page.expect_event("requestfailed", predicate=is_first):
        await page.clock.run_for(GIVE_UP_MS)
    await expect(error).to_have_text("Could not list the runs: no answer in 30 s")

    await page.clock.run_for(EVERY_MS)
    await expect(page.locator("#runs")).to_contain_text("fresh-row")
    await expect(error).to_have_text("")
    assert len(asked) == 2, asked
