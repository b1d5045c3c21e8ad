"""A finished run on the page costs its worker one replay per question, once per process: every
query of a closed run is answered by a worker replaying it, and the page asks a run's state and
conversation at each refresh and reads its stream as it opens (``treadle.closed``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput

from tests.support.harness import Harness
from treadle.stream import POLL_QUERY, read_items
from treadle.web.ui import actions

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}


class CountQueries(Interceptor):
    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        asked = self.asked

        class Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                asked["poll" if input.query == POLL_QUERY else input.query] += 1
                return await super().query_workflow(input)

        return Outbound(next)


async def test_a_finished_runs_view_and_stream_are_asked_of_its_worker_once(
    harness: Harness,
) -> None:
    counted = CountQueries()
    config = harness.client.config()
    config["interceptors"] = [*config["interceptors"], counted]
    client = Client(**config)
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Written."})
    handle = await harness.start(model, "Write notes.md.", require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    for _ in range(2):
        await actions.run_view(client, handle.id, None)
    assert counted.asked["state"] >= 2 and counted.asked["export"] == 2  # open: asked each time

    await handle.terminate("the page reads it closed")
    before = Counter(counted.asked)
    views = [await actions.run_view(client, handle.id, None) for _ in range(3)]
    reads = [await read_items(client, handle.id) for _ in range(2)]
    asked = counted.asked - before

    assert all(v["status"]["state"] == "WaitingForHuman" for v in views)
    assert all(v == views[0] for v in views)
    assert reads[0] == reads[1] and any(i.value.kind == "approval_needed" for i in reads[0])
    assert asked == Counter({"state": 1, "export": 1, "poll": 1}), asked
