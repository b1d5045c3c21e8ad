"""MonitorWorkflow on the real dev server: it continues as new under a burst of check-ins
without losing one, and deleting a monitor completes its workflow and frees its slug."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStreamClient, WorkflowStreamItem
from temporalio.worker import Replayer

from tests.support.harness import keep_history, running_worker
from tests.support.monitors import Handle, start_monitor, until
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.workflows.monitors.models import (
    EVENTS_TOPIC,
    CheckInSignal,
    CheckInStatus,
    DeleteRequest,
    Health,
)
from treadle.workflows.monitors.workflow import EVENTS_KEPT, MonitorWorkflow


async def start(client: Client, task_queue: str, slug: str, **fields: Any) -> Handle:
    return await start_monitor(client, task_queue, slug, f"{slug}.{'p' * 20}", **fields)


async def waiting_on_a_timer(handle: Handle, timeout: float = 15) -> None:
    """Wait until the monitor's current run has started its deadline timer."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        history = await handle.fetch_history()
        if any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in history.events):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the monitor's current run has no deadline timer")
        await asyncio.sleep(0.1)


@pytest.mark.replay_corpus
async def test_a_burst_of_check_ins_across_continue_as_new_loses_nothing(client: Client) -> None:
    """80 check-ins signalled at once to a monitor that continues as new every ~40 events: all
    80 are recorded in order, the run after the burst waits on its deadline timer, and every
    run's history replays."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    slug = f"burst-{uuid.uuid4().hex[:8]}"
    handle = await start(client, task_queue, slug, continue_as_new_after_events=40)
    async with running_worker(client, task_queue):
        await asyncio.gather(
            *(
                handle.signal(
                    MonitorWorkflow.checkin,
                    CheckInSignal(
                        status=CheckInStatus.ERROR if i % 4 == 0 else CheckInStatus.OK,
                        output=f"run {i:02d}",
                    ),
                )
                for i in range(80)
            )
        )
        final = await until(handle, lambda v: v.total_checkins == 80, timeout=30, recent=500)
        assert (final.total_failures, final.ping_key) == (20, f"{slug}.{'p' * 20}")
        assert sorted(c.output or "" for c in final.recent) == [f"run {i:02d}" for i in range(80)]
        assert [c.id for c in reversed(final.recent)] == list(range(1, 81))
        await waiting_on_a_timer(handle)  # the run after the burst keeps time
        await handle.execute_update(MonitorWorkflow.delete, DeleteRequest(reason="test over"))
        await handle.result()

    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )
    run_id: str | None = handle.first_execution_run_id or handle.result_run_id
    runs = 0
    while run_id:  # follow the chain of runs from the first
        runs += 1
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        kinds = [e.event_type for e in history.events]
        # The only failed task allowed is the server's "UnhandledCommand": it refuses to close
        # a run while new signals wait, so they go to this run, never get lost between two.
        causes = {
            e.workflow_task_failed_event_attributes.cause
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        }
        assert causes <= {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
        await replayer.replay_workflow(history)
        keep_history(f"monitor-burst-across-continue-as-new-{runs}", history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    assert runs >= 2, "the monitor should have continued as new"


async def test_deleting_a_monitor_completes_it_and_frees_the_slug(client: Client) -> None:
    """The delete update answers with the final view, the workflow completes, and the slug can
    name a new monitor."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    slug = f"gone-{uuid.uuid4().hex[:8]}"
    handle = await start(client, task_queue, slug)
    async with running_worker(client, task_queue):
        await handle.signal(MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.OK))
        await until(handle, lambda v: v.health is Health.HEALTHY)
        answer = await handle.execute_update(MonitorWorkflow.delete, DeleteRequest())
        result = await handle.result()
        assert answer.total_checkins == result.total_checkins == 1
        assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
        again = await start(client, task_queue, slug)
        fresh = await until(again, lambda v: v.next_expected is not None)
        assert (fresh.total_checkins, fresh.health) == (0, Health.UNKNOWN)
        await again.terminate(reason="test over")


async def test_the_stream_keeps_its_newest_items_whoever_published_them(client: Client) -> None:
    """Any client may publish to a monitor's stream through its signal. Trimming reads the
    stream's own offsets, so 150 items from another client and then one check-in leave the newest
    100 items, offsets 51 to 150, the check-in's event last."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    handle = await start(client, task_queue, f"trim-{uuid.uuid4().hex[:8]}")
    async with running_worker(client, task_queue):
        # The monitor's first task done before anything is sent: in that task the stream's
        # publish handler, registered in ``__init__``, runs after the class's own (the SDK's
        # note on WorkflowStream), so the check-in would come before the items it should trim.
        await until(handle, lambda v: v.total_checkins == 0)
        stream = WorkflowStreamClient.create(client, handle.id)
        other = stream.topic("other")
        for i in range(150):
            other.publish(i)
        await stream.flush()
        await handle.signal(MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.OK))
        await until(handle, lambda v: v.total_checkins == 1)
        assert await stream.get_offset() == 151
        kept: list[WorkflowStreamItem[RawValue]] = []
        async with (
            asyncio.timeout(20),
            aclosing(stream.subscribe(from_offset=0, result_type=RawValue)) as items,
        ):
            async for item in items:  # from 0: the oldest retained item on
                kept.append(item)
                if len(kept) == EVENTS_KEPT:
                    break
        await handle.terminate(reason="test over")
    assert [item.offset for item in kept] == list(range(51, 151))
    assert [item.topic for item in kept[-2:]] == ["other", EVENTS_TOPIC]
