"""A finished run on the page costs its worker one replay per question, once per process: every
query of a closed run is answered by a worker replaying it, and the page asks a run's state and
conversation at each refresh and reads its stream as it opens (``treadle.closed``)."""

from __future__ import annotations

from collections import Counter

from bench.watchers import Counting, counting_client
from tests.support.harness import Harness
from treadle.client import AgentClient
from treadle.stream import read_items
from treadle.web.api import actions

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hello"}}


async def test_a_finished_runs_view_and_stream_are_asked_of_its_worker_once(
    harness: Harness,
) -> None:
    counted = Counting()  # the benchmark's count of what a client asks the server
    client = counting_client(harness.client, counted)
    agents = AgentClient(client)  # the page's client
    model = harness.script({"tool_calls": [WRITE]}, {"content": "Written."})
    handle = await harness.start(model, "Write notes.md.", require_approval=["write_file"])
    await harness.wait_for_state(handle, "WaitingForHuman")
    for _ in range(2):
        await actions.run_view(agents, handle.id, None)
    assert counted.counts["query state"] >= 2 and counted.counts["query export"] == 2  # open

    await handle.terminate("the page reads it closed")
    before = Counter(counted.counts)
    views = [await actions.run_view(agents, handle.id, None) for _ in range(3)]
    reads = [await read_items(client, handle.id) for _ in range(2)]
    asked = counted.counts - before
    del asked["describe"]  # the server's alone: how a closed run is told from an open one

    assert all(v.status["state"] == "WaitingForHuman" for v in views)
    assert all(v == views[0] for v in views)
    assert reads[0] == reads[1] and any(
        getattr(i.value, "kind", "") == "approval_needed" for i in reads[0]
    )
    assert asked == Counter({"query state": 1, "query export": 1, "poll": 1}), asked
