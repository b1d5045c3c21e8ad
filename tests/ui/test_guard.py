"""Who may use the page, without a browser (httpx through the app): loopback host names only,
the access token once in the URL then in a cookie no script reads, CSRF-checked changes, and no
secret in any page."""

from __future__ import annotations

import httpx
from temporalio.client import Client

from treadle.web.guard import CSRF_COOKIE, TOKEN_COOKIE
from treadle.web.ui import ui_app

TOKEN = "tok-" + "x" * 20


def browser(
    client: Client, *, token: str | None = None, host: str = "127.0.0.1:8765"
) -> httpx.AsyncClient:
    app = ui_app(client, task_queue="ui-guard", token=token, loopback=token is None)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


async def test_on_loopback_a_request_for_another_host_name_is_refused(client: Client) -> None:
    """A page whose domain was re-pointed at 127.0.0.1 (DNS rebinding) gets nothing."""
    async with browser(client, host="evil.example:8765") as http:
        response = await http.get("/")
    assert response.status_code == 421
    async with browser(client, host="localhost:8765") as http:
        assert (await http.get("/")).status_code == 200


async def test_a_change_needs_the_csrf_header_and_the_pages_own_origin(client: Client) -> None:
    """A POST without the double-submitted CSRF value, or from another origin, is refused
    before the app sees it; with both it reaches the app (which then checks the body)."""
    async with browser(client) as http:
        first = await http.get("/")
        csrf = first.cookies[CSRF_COOKIE]
        assert csrf and csrf not in first.text
        refused = await http.post("/v1/runs", json={"task": ""})
        assert refused.status_code == 403
        assert "CSRF" in refused.json()["error"]
        headers = {"X-Treadle-CSRF": csrf}
        other = await http.post(
            "/v1/runs", json={"task": ""}, headers={**headers, "Origin": "http://evil.example"}
        )
        assert other.status_code == 403
        own = await http.post(
            "/v1/runs", json={"task": ""}, headers={**headers, "Origin": "http://127.0.0.1:8765"}
        )
        assert own.status_code == 400
        assert "task" in own.json()["error"]


async def test_the_access_token_opens_the_page_once_and_never_shows_in_it(client: Client) -> None:
    """With a token: nothing without it (nor with a wrong one); the printed URL's token becomes
    an HttpOnly cookie and the address loses it; the page's HTML never holds it; a script may
    send it as a bearer token."""
    async with browser(client, token=TOKEN, host="192.0.2.1:8765") as http:
        assert (await http.get("/")).status_code == 401
        assert (await http.get("/?token=wrong")).status_code == 401
        assert (await http.get("/v1/runs")).status_code == 401
        entered = await http.get(f"/runs/r1?token={TOKEN}")
        assert entered.status_code == 303
        assert entered.headers["location"] == "/runs/r1"
        cookie = entered.headers["set-cookie"]
        assert cookie.startswith(f"{TOKEN_COOKIE}={TOKEN}")
        assert "httponly" in cookie.lower()
        assert "samesite=strict" in cookie.lower()
        for path in ("/", "/runs/r1", "/static/run.js", "/static/common.js"):
            page = await http.get(path)
            assert page.status_code == 200, path
            assert TOKEN not in page.text
    async with browser(client, token=TOKEN, host="192.0.2.1:8765") as http:
        scripted = await http.get("/static/ui.css", headers={"Authorization": f"Bearer {TOKEN}"})
        assert scripted.status_code == 200


async def test_pages_load_nothing_from_elsewhere(client: Client) -> None:
    """Every answer forbids other origins' scripts and framing, and is never cached."""
    async with browser(client) as http:
        for path in ("/", "/runs/r1", "/static/runs.js", "/no/such/page"):
            response = await http.get(path)
            assert "default-src 'self'" in response.headers["content-security-policy"], path
            assert response.headers["cache-control"] == "no-store", path
        assert (await http.get("/static/../guard.py")).status_code == 404
