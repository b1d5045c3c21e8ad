"""The browser page (``starter.py ui``) in a real browser: Playwright driving headless Chromium
from Debian's packages (``apt-get install chromium``; ``.ci/run`` installs it), against the real
dev server, a real worker and the scripted model.

One browser per module; each test gets the page's app on a free loopback port, serving the
harness's client and task queue, and a fresh browser context (its own cookies).

``TREADLE_UI_SCREENSHOTS=DIR`` saves the screenshots the tests take (docs/ui-*.png come from
``TREADLE_UI_SCREENSHOTS=docs .venv/bin/pytest tests/ui``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tests.support.harness import TEST_STORE, Harness
from treadle.client import AgentClient
from treadle.web import serve
from treadle.web.ui import ui_app

CHROMIUM = os.environ.get("TREADLE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
EXPECT_TIMEOUT_MS = 30_000
"""How long an ``expect`` waits for the page (it passes as soon as the page shows it)."""

try:
    from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect
except ImportError:  # pragma: no cover - the test extra installs it
    async_playwright = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    if async_playwright is None:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: install Debian's (apt-get install chromium, as .ci/run "
            "does) or point TREADLE_CHROMIUM at one"
        )
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        await launched.close()


@pytest.fixture
async def ui(harness: Harness) -> AsyncIterator[str]:
    """The page's base URL, serving the harness's namespace and task queue."""
    # The workers' store: a fork checks its step's workspace snapshot out of it.
    agents = AgentClient(harness.client, task_queue=harness.task_queue, store=str(TEST_STORE))
    app = ui_app(agents, task_queue=harness.task_queue, web_ui="http://127.0.0.1:8233")
    served = await serve.start(app)
    yield served.url
    await served.stop()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    opened = await browser.new_context(viewport={"width": 1000, "height": 900})
    yield opened
    await opened.close()


@pytest.fixture
async def page(context: BrowserContext) -> Page:
    return await context.new_page()


VIEWPORTS = {
    "phone": {"width": 390, "height": 844},
    "desktop": {"width": 1280, "height": 900},
}
"""The two screens the page is checked on: a phone held upright, and a laptop."""


@pytest.fixture(params=list(VIEWPORTS))
async def screen(request: pytest.FixtureRequest, browser: Browser) -> AsyncIterator[Page]:
    """A page in a fresh context sized as a phone (touch, mobile) or as a desktop."""
    phone = request.param == "phone"
    opened = await browser.new_context(
        viewport=VIEWPORTS[request.param], is_mobile=phone, has_touch=phone
    )
    yield await opened.new_page()
    await opened.close()


@pytest.fixture
def screenshot() -> Callable[[Page, str], Awaitable[None]]:
    """``await screenshot(page, name)`` saves ``name``.png into ``TREADLE_UI_SCREENSHOTS``
    when it is set (docs/ui-*.png); otherwise it does nothing."""

    async def take(page: Page, name: str) -> None:
        directory = os.environ.get("TREADLE_UI_SCREENSHOTS")
        if directory:
            await page.screenshot(path=str(Path(directory) / f"{name}.png"), full_page=True)

    return take
