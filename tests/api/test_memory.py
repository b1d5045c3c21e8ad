"""Long-term memory over HTTP: a namespace's items added, listed, recalled, edited and forgotten
through ``/v1/memory``, the same items a run's ``recall`` tool finds; a bad namespace or body is
a 400 naming it, an item the namespace does not hold a 404, all in the OpenAPI document."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx

from tests.support.harness import Harness, tool_messages
from tests.support.http_api import run_body, started, until_state
from treadle.client import AgentClient

DEPLOY = "The team deploys on Fridays, with pnpm."


async def test_a_namespace_is_kept_listed_recalled_edited_and_forgotten_over_http(
    harness: Harness, http: httpx.AsyncClient
) -> None:
    """``remember`` adds an item (201, key shapes redacted), ``GET /v1/memory`` lists it,
    ``recall`` finds it by keyword and misses on other words, ``edit`` replaces its text (the
    client reads the new one), ``forget`` removes it; forgetting it again is a 404."""
    namespace = f"user:alice/agent:{uuid.uuid4().hex[:8]}"
    key = "sk-proj-" + uuid.uuid4().hex + uuid.uuid4().hex[:12]
    added = await http.post(
        "/v1/memory/remember", json={"namespace": namespace, "text": DEPLOY, "by": "alice"}
    )
    assert added.status_code == 201, added.text
    item = added.json()
    assert (item["id"], item["text"], item["by"]) == ("m1", DEPLOY, "alice")
    secret = await http.post(
        "/v1/memory/remember",
        json={"namespace": namespace, "text": f"The key is {key}.", "ttl_days": 1},
    )
    assert secret.status_code == 201 and key not in secret.text, secret.text
    assert secret.json()["expires_at"]

    listed = await http.get("/v1/memory", params={"namespace": namespace})
    assert listed.status_code == 200, listed.text
    assert [i["text"] for i in listed.json()["items"]] == [DEPLOY, "The key is [redacted]."]
    found = await http.get(
        "/v1/memory/recall", params={"namespace": namespace, "query": "when do we deploy"}
    )
    assert [i["id"] for i in found.json()["items"]] == ["m1"]
    missed = await http.get(
        "/v1/memory/recall", params={"namespace": namespace, "query": "holidays"}
    )
    assert missed.json()["items"] == []

    edited = await http.post(
        "/v1/memory/edit", json={"namespace": namespace, "id": "m1", "text": "Deploys: Thursdays."}
    )
    assert edited.status_code == 200 and edited.json()["text"] == "Deploys: Thursdays."
    client = AgentClient(harness.client, task_queue=harness.task_queue)
    first = (await client.memory_items(namespace))[0]
    assert first.text == "Deploys: Thursdays."

    gone = await http.post("/v1/memory/forget", json={"namespace": namespace, "id": "m1"})
    assert gone.status_code == 200 and gone.json()["id"] == "m1"
    again = await http.post("/v1/memory/forget", json={"namespace": namespace, "id": "m1"})
    assert again.status_code == 404 and "no item 'm1'" in again.json()["error"], again.text
    left = await http.get("/v1/memory", params={"namespace": namespace})
    assert [i["id"] for i in left.json()["items"]] == ["m2"]


async def test_what_a_person_keeps_over_http_a_run_recalls(
    harness: Harness, http: httpx.AsyncClient, track: Callable[[str], str]
) -> None:
    """An item added over HTTP is what a run of that namespace finds with its ``recall``
    tool; a namespace nobody wrote to lists nothing."""
    namespace = f"acme/support-{uuid.uuid4().hex[:8]}"
    kept = await http.post("/v1/memory/remember", json={"namespace": namespace, "text": DEPLOY})
    assert kept.status_code == 201, kept.text
    recall = {"tool_calls": [{"name": "recall", "arguments": {"query": "deploy"}}]}
    model = harness.script(recall, {"content": "Fridays."})
    memory = {"memory": {"namespace": namespace}}
    body = run_body(harness, model, "When do we deploy?", config=memory)
    run_id = await started(http, body, track)
    await until_state(http, run_id, "Done")
    assert tool_messages(harness.requests(model)[1])[-1]["content"] == f"m1: {DEPLOY}"
    empty = await http.get("/v1/memory", params={"namespace": f"nobody-{uuid.uuid4().hex[:8]}"})
    assert empty.status_code == 200 and empty.json()["items"] == []


async def test_bad_memory_requests_are_refused_with_the_reason(http: httpx.AsyncClient) -> None:
    """No namespace, a namespace outside its pattern, an empty or too long text, an unknown
    field and an edit of an item nobody kept: each refused as JSON saying why."""
    namespace = f"acme/bad-{uuid.uuid4().hex[:8]}"
    nameless = await http.get("/v1/memory")
    assert nameless.status_code == 400 and "namespace" in nameless.json()["error"]
    spaced = await http.get("/v1/memory", params={"namespace": "has spaces"})
    assert spaced.status_code == 400 and "namespace" in spaced.json()["error"]
    for body in (
        {"namespace": namespace, "text": ""},
        {"namespace": namespace, "text": "x" * 2_001},
        {"namespace": namespace, "text": "ok", "ttl": 3},
        {"namespace": "../etc", "text": "ok"},
    ):
        refused = await http.post("/v1/memory/remember", json=body)
        assert refused.status_code == 400 and refused.json()["error"], (body, refused.text)
    unknown = await http.post(
        "/v1/memory/edit", json={"namespace": namespace, "id": "m7", "text": "new"}
    )
    assert unknown.status_code == 404 and namespace in unknown.json()["error"], unknown.text
    limit = await http.get("/v1/memory/recall", params={"namespace": namespace, "limit": "99"})
    assert limit.status_code == 400 and "limit" in limit.json()["error"]
