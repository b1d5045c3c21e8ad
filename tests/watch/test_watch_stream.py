"""``treadle.stream.watch_events`` on a small workflow that hosts a stream and is told what to
publish: offsets that are no longer kept (a gap, noted once), "from now", an item that is not
an event (skipped), and a run that closes without an ``ended`` event (read to its end)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
)
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.support.waits import until
from treadle import stream
from treadle.stream import (
    CLOSED_CHECK_SECONDS,
    POLL_QUERY,
    StreamItem,
    StreamNotice,
    read_items,
    stream_end,
    watch_events,
)
from treadle.workflows.agent.messages.events import EVENTS_TOPIC, AgentEvent

AT = datetime(2026, 1, 1, tzinfo=UTC)


@workflow.defn(sandboxed=False)
class PublishingWorkflow:
    """Publishes what its signals say; ends on ``finish``."""

    @workflow.init
    def __init__(self) -> None:
        self.stream = WorkflowStream()
        self.done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.done)

    @workflow.signal
    def publish(self, texts: list[str]) -> None:
        topic = self.stream.topic(EVENTS_TOPIC)
        for text in texts:
            if text == "not an event":
                topic.publish({"something": "else"})
            else:
                topic.publish(AgentEvent(kind="message", step=0, state="Idle", at=AT, text=text))

    @workflow.signal
    def keep_from(self, offset: int) -> None:
        self.stream.truncate(offset)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.signal
    def publish_and_finish(self, texts: list[str]) -> None:
        """The last items and the end in one workflow task: a poll from before it cannot
        have them, so only a poll asked after the close may end a watch."""
        self.publish(texts)
        self.finish()


async def collect(
    client: Client, workflow_id: str, from_offset: int | None, notices: list[StreamNotice]
) -> list[StreamItem]:
    return [
        item
        async for item in watch_events(
            client, workflow_id, from_offset=from_offset, on_notice=notices.append, cooldown=0.05
        )
    ]


def texts(items: list[StreamItem]) -> list[tuple[int, str]]:
    return [(i.offset, i.value.text) for i in items if isinstance(i.value, AgentEvent)]


async def test_gaps_from_now_skipped_items_and_a_run_that_closes(client: Client) -> None:
    """A reader behind the kept items hears of the gap once and reads on from the oldest kept;
    "from now" starts at the end; a foreign item is skipped with a notice; a run that closes
    without an ``ended`` event is read to its last item, then the iteration ends."""
    queue = f"stream-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[PublishingWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=f"stream-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await handle.signal(PublishingWorkflow.publish, [f"e{i}" for i in range(10)])
        await handle.signal(PublishingWorkflow.keep_from, 6)
        assert await stream_end(handle) == 10

        notices: list[StreamNotice] = []
        reader = asyncio.create_task(collect(client, handle.id, 2, notices))
        now: list[StreamNotice] = []
        from_now = asyncio.create_task(collect(client, handle.id, None, now))
        await asyncio.sleep(1)
        await handle.signal(PublishingWorkflow.publish, ["e10", "not an event", "e12"])
        await asyncio.sleep(1)
        await handle.signal(PublishingWorkflow.finish)
        read = await asyncio.wait_for(reader, 30)
        read_now = await asyncio.wait_for(from_now, 30)

    assert texts(read) == [(6, "e6"), (7, "e7"), (8, "e8"), (9, "e9"), (10, "e10"), (12, "e12")]
    assert [(n.kind, n.offset, n.resumed_at) for n in notices] == [
        ("gap", 2, 6),
        ("skipped", 11, 0),
    ]
    assert texts(read_now) == [(10, "e10"), (12, "e12")]
    assert [n.kind for n in now] == ["skipped"]


class CountPolls(Interceptor):
    """Counts the stream polls a client sends, by the offset each asks from, and its
    ``describe`` calls, noting how many polls had been asked when one first said closed."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.described = 0
        self.described_since_poll = 0
        self.polls_before_closed: int | None = None

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counter = self

        class Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                if input.query == POLL_QUERY:
                    counter.offsets.append(input.args[0].from_offset)
                    counter.described_since_poll = 0
                return await super().query_workflow(input)

            async def describe_workflow(
                self, input: DescribeWorkflowInput
            ) -> WorkflowExecutionDescription:
                counter.described += 1
                counter.described_since_poll += 1
                answer = await super().describe_workflow(input)
                closed = answer.status is not WorkflowExecutionStatus.RUNNING
                if closed and counter.polls_before_closed is None:
                    counter.polls_before_closed = len(counter.offsets)
                return answer

        return Outbound(next)


@contextlib.asynccontextmanager
async def counted_worker(client: Client) -> AsyncIterator[tuple[Client, CountPolls, str]]:
    """A worker for ``PublishingWorkflow`` on a queue of its own (yielded last), and a client
    on the same connection whose polls and describes are counted."""
    queue = f"stream-{uuid.uuid4().hex[:8]}"
    counted = CountPolls()
    watching = Client(
        client.service_client,
        namespace=client.namespace,
        data_converter=client.data_converter,
        interceptors=[counted],
    )
    async with Worker(
        client,
        task_queue=queue,
        workflows=[PublishingWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        yield watching, counted, queue


async def test_watchers_in_one_process_share_the_polls_of_a_run(client: Client) -> None:
    """Twenty views of one run in one process (the browser page serving twenty browsers) ask
    the server once for what they all wait for, and each reads every item, in order. They
    share the check whether the run has closed (at most one ``describe`` a second between
    them, where each asked once a second), and the poll after the close (one each before),
    which reads what the run published as it closed."""
    async with counted_worker(client) as (watching, counted, queue):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=f"stream-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await handle.signal(PublishingWorkflow.publish, ["a", "b"])
        assert await stream_end(handle) == 2
        started = time.monotonic()
        views = [asyncio.create_task(collect(watching, handle.id, 0, [])) for _ in range(20)]
        await asyncio.sleep(0.5)
        await handle.signal(PublishingWorkflow.publish, ["c"])
        await asyncio.sleep(1.5)  # long enough for the quiet views to check for a close
        await handle.signal(PublishingWorkflow.publish_and_finish, ["d"])
        read = [await asyncio.wait_for(view, 30) for view in views]
        watched = time.monotonic() - started

    assert all(texts(r) == [(0, "a"), (1, "b"), (2, "c"), (3, "d")] for r in read)
    assert counted.offsets.count(0) == 1
    # One describe per second of watching, shared (and one more for the second it began in).
    described = counted.described
    assert 1 <= described <= watched / CLOSED_CHECK_SECONDS + 1, (described, watched)
    assert counted.polls_before_closed is not None
    after_close = len(counted.offsets) - counted.polls_before_closed
    # One poll after the close for views in step, one more for each group a busy machine puts
    # out of step (a quiet pause apart); without sharing, one for each of the twenty views.
    assert 1 <= after_close <= 3, counted.offsets


async def test_a_quiet_run_is_described_not_queried_and_read_again_once_it_moves(
    client: Client,
) -> None:
    """A caught-up view of a run that publishes nothing asks the server (``describe``) whether
    it has moved, not the run's worker (a poll): polls stop once it is quiet, however long it
    stays so, and the next item is read once the run moves (its history grows)."""
    async with counted_worker(client) as (watching, counted, queue):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=f"stream-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await handle.signal(PublishingWorkflow.publish, ["a"])
        view = asyncio.create_task(collect(watching, handle.id, 0, []))
        # Read "a", an empty poll, a poll after a describe (the run's history as described
        # before it), then describes that find the history unchanged: two in a row, no poll.
        await until(lambda: counted.described_since_poll >= 2, "the view never went quiet")
        quiet_polls = len(counted.offsets)
        await until(
            lambda: counted.described_since_poll >= 3 or len(counted.offsets) > quiet_polls,
            "the quiet view stopped describing",
        )
        assert len(counted.offsets) == quiet_polls, counted.offsets
        assert counted.offsets[-1] == 1  # caught up after "a"
        await handle.signal(PublishingWorkflow.publish, ["b"])
        await until(lambda: len(counted.offsets) > quiet_polls, "the run moved, no poll")
        await handle.signal(PublishingWorkflow.finish)
        read = await asyncio.wait_for(view, 30)

    assert texts(read) == [(0, "a"), (1, "b")]


async def test_a_run_closed_before_the_watch_is_read_by_one_poll(client: Client) -> None:
    """Every poll of a closed run is a replay of it by a worker: a watch that begins after the
    close learns of it first (``describe``) and reads everything in one poll."""
    async with counted_worker(client) as (watching, counted, queue):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=f"stream-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await handle.signal(PublishingWorkflow.publish_and_finish, ["a", "b"])
        await handle.result()
        read = await asyncio.wait_for(collect(watching, handle.id, 0, []), 30)

    assert texts(read) == [(0, "a"), (1, "b")]
    assert counted.offsets == [0]


async def test_a_closed_run_is_read_once_per_process_and_a_new_run_of_its_id_afresh(
    client: Client,
) -> None:
    """``read_items`` of a closed run asks a worker once (each query of a closed run is a
    replay of it); an open run is asked every time; a new run started with the same workflow
    id after the close is read from itself, never answered from the old run's kept items."""
    workflow_id = f"stream-{uuid.uuid4().hex[:8]}"
    async with counted_worker(client) as (watching, counted, queue):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=workflow_id, task_queue=queue
        )
        await handle.signal(PublishingWorkflow.publish, ["a"])
        assert texts(await read_items(watching, workflow_id)) == [(0, "a")]
        assert texts(await read_items(watching, workflow_id)) == [(0, "a")]
        assert len(counted.offsets) == 2  # open: asked each time

        await handle.signal(PublishingWorkflow.publish_and_finish, ["b"])
        await handle.result()
        reads = await asyncio.gather(*(read_items(watching, workflow_id) for _ in range(3)))
        reads.append(await read_items(watching, workflow_id))
        assert all(texts(r) == [(0, "a"), (1, "b")] for r in reads)
        assert len(counted.offsets) == 3  # closed: one poll for the four reads
        assert texts(await read_items(watching, workflow_id, from_offset=1)) == [(1, "b")]

        again = await client.start_workflow(
            PublishingWorkflow.run, id=workflow_id, task_queue=queue
        )
        await again.signal(PublishingWorkflow.publish_and_finish, ["c"])
        await again.result()
        assert texts(await read_items(watching, workflow_id)) == [(0, "c")]


async def test_a_backlog_longer_than_one_poll_is_read_whole_while_the_run_waits(
    client: Client,
) -> None:
    """One poll answers at most about 1 MB (``more_ready`` says there is more). A reader
    behind by more than that on a run that does not move reads on at once: the pages after the
    first are not taken for a caught-up reader's quiet round."""
    async with counted_worker(client) as (watching, counted, queue):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=f"stream-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        for batch in range(4):
            texts_ = [f"{batch}-{i}-" + "x" * 3_000 for i in range(100)]
            await handle.signal(PublishingWorkflow.publish, texts_)
        assert await stream_end(handle) == 400
        read: list[StreamItem] = []

        async def follow() -> None:
            async for item in watch_events(watching, handle.id, cooldown=0.05):
                read.append(item)

        view = asyncio.create_task(follow())
        await until(lambda: len(read) >= 400 or view.done(), "the reader stopped mid-backlog")
        assert len(read) == 400 and len(set(counted.offsets)) >= 2, counted.offsets
        await handle.signal(PublishingWorkflow.finish)
        await asyncio.wait_for(view, 30)


async def test_a_caught_up_reader_of_a_run_that_waits_hears_when_its_worker_is_gone(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that asks only ``describe`` of a run that does not move still polls now and
    then (``QUIET_POLL_SECONDS``), so it hears "waiting for a worker" once no worker answers."""
    notices: list[StreamNotice] = []
    async with counted_worker(client) as (watching, counted, queue):
        handle = await client.start_workflow(
            PublishingWorkflow.run, id=f"stream-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await handle.signal(PublishingWorkflow.publish, ["a"])
        view = asyncio.create_task(collect(watching, handle.id, 0, notices))
        await until(lambda: counted.described_since_poll >= 2, "the view never went quiet")
        # Quiet (describes only): the check every QUIET_POLL_SECONDS, shortened for the test.
        monkeypatch.setattr(stream, "QUIET_POLL_SECONDS", 2.0)
    # The worker is gone: the next poll is not answered.
    await until(lambda: any(n.kind == "waiting" for n in notices), "no waiting notice")
    view.cancel()
    await handle.terminate("the test is over")
