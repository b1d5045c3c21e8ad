"""What every request meets before and after a run is asked: the OpenAPI document lists every
route the API (and the page's app) serves and is valid OpenAPI 3.1; off loopback nothing goes
without the token; no cross-origin access unless configured; bodies have a size limit; every
error, whatever its cause, is JSON with a reason."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from starlette.routing import Route
from temporalio.client import Client

from treadle.client import AgentClient
from treadle.web.api import ApiSettings, api_app, api_routes
from treadle.web.ui import ui_app

TOKEN = "tok-" + "y" * 24


def through(app: Any, host: str = "127.0.0.1:8766") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


def served_routes(app: Any) -> set[tuple[str, str]]:
    """(method, path) of every route an app serves, asking each route which methods it takes."""
    while not hasattr(app, "routes"):  # through the middleware to the Starlette app
        app = app.app if hasattr(app, "app") else app.middleware_stack
    found = set()
    for route in app.routes:
        assert isinstance(route, Route)
        found.update((method, route.path) for method in route.app.methods)  # type: ignore[attr-defined]
    return found


async def test_every_route_is_in_the_openapi_document_and_it_is_valid(client: Client) -> None:
    """The document served at /v1/openapi.json names every method and path the API serves
    (the page's app serves the same ones beside its files), with a schema for every body and
    answer, and passes the OpenAPI 3.1 validator."""
    settings = ApiSettings(task_queue="api-contract")
    async with through(api_app(client, settings)) as http:
        document = (await http.get("/v1/openapi.json")).json()
    validate(document)
    documented = {
        (method.upper(), path) for path, methods in document["paths"].items() for method in methods
    }
    routes = {(m, r.path) for r in api_routes(AgentClient(client), settings)
              for m in r.app.methods}  # type: ignore[attr-defined]  # fmt: skip
    assert routes == documented
    pages = ("/", "/memory")
    page_api = {(m, p) for m, p in served_routes(ui_app(client, task_queue="x")) if p not in pages
                and not p.startswith(("/runs/", "/static/"))}  # fmt: skip
    assert page_api == documented
    assert {
        "POST /v1/runs",
        "POST /v1/runs/{id}/approve",
        "GET /v1/runs/{id}/events",
        "GET /v1/memory",
        "POST /v1/memory/forget",
    } <= {f"{m} {p}" for m, p in documented}
    schemas = document["components"]["schemas"]
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            body = operation.get("requestBody")
            if body is not None:
                ref = body["content"]["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[1] in schemas, (method, path)
            ok = next(v for k, v in operation["responses"].items() if k.startswith("2"))
            for content in ok["content"].values():
                ref = content.get("schema", {}).get("$ref")
                assert ref is None or ref.rsplit("/", 1)[1] in schemas, (method, path)


async def test_off_loopback_nothing_goes_without_the_token(client: Client) -> None:
    """Off loopback the API will not start without a token; with one, a request without it (or
    with a wrong one) is a 401 with a reason, and with it the API answers."""
    with pytest.raises(ValueError, match="token"):
        api_app(client, ApiSettings(task_queue="api-contract", loopback=False))
    app = api_app(client, ApiSettings(task_queue="api-contract", token=TOKEN, loopback=False))
    async with through(app, host="192.0.2.7:8766") as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            refused = await http.get("/v1/openapi.json", headers=headers)
            assert refused.status_code == 401 and "token" in refused.json()["error"]
        posted = await http.post("/v1/runs", json={"task": "x"})
        assert posted.status_code == 401
        allowed = await http.get("/v1/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"})
        assert allowed.status_code == 200 and allowed.json()["openapi"].startswith("3.1")


async def test_no_cross_origin_access_unless_configured(client: Client) -> None:
    """By default no CORS header is answered and a change from another origin is refused; an
    origin configured gets its preflight answered and may send changes, another still not."""
    plain = api_app(client, ApiSettings(task_queue="api-contract"))
    async with through(plain) as http:
        read = await http.get("/v1/openapi.json", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in read.headers
        change = await http.post(
            "/v1/runs", json={"task": ""}, headers={"Origin": "https://app.example"}
        )
        assert change.status_code == 403 and "app.example" in change.json()["error"]

    configured = api_app(
        client, ApiSettings(task_queue="api-contract", origins=["https://app.example"])
    )
    async with through(configured) as http:
        preflight = await http.options(
            "/v1/runs",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type, authorization",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        change = await http.post(
            "/v1/runs", json={"task": ""}, headers={"Origin": "https://app.example"}
        )
        assert change.status_code == 400  # through the guard: the body's own check
        assert change.headers["access-control-allow-origin"] == "https://app.example"
        other = await http.post(
            "/v1/runs", json={"task": ""}, headers={"Origin": "https://evil.example"}
        )
        assert other.status_code == 403


async def test_every_error_is_json_with_a_reason(client: Client) -> None:
    """A body over the limit (413), one that is not JSON (415 / 400), a field that does not fit
    (400 naming it), an unknown path (404), a method the route does not take (405): each
    answers ``{"error": "..."}``."""
    app = api_app(client, ApiSettings(task_queue="api-contract", max_body=1000))
    async with through(app) as http:
        answers = {
            "too large": await http.post("/v1/runs", json={"task": "x" * 2000}),
            "not json type": await http.post("/v1/runs", content=b"task=x",
                                             headers={"Content-Type": "text/plain"}),
            "not json": await http.post("/v1/runs", content=b"{",
                                        headers={"Content-Type": "application/json"}),
            "wrong field": await http.post("/v1/runs", json={"task": "x", "modle": "y"}),
            "no path": await http.get("/v1/nothing"),
            "wrong method": await http.delete("/v1/runs"),
            "bad limit": await http.get("/v1/runs", params={"limit": "0"}),
            "bad filter": await http.get("/v1/runs", params={"state": "sleepy"}),
        }  # fmt: skip
    statuses = {name: response.status_code for name, response in answers.items()}
    assert statuses == {
        "too large": 413,
        "not json type": 415,
        "not json": 400,
        "wrong field": 400,
        "no path": 404,
        "wrong method": 405,
        "bad limit": 400,
        "bad filter": 400,
    }
    for name, response in answers.items():
        assert response.headers["content-type"] == "application/json", name
        assert response.json()["error"].strip(), name
    assert "modle" in answers["wrong field"].json()["error"]
    assert "openapi.json" in answers["no path"].json()["error"]
