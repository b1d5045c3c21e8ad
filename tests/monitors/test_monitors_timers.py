"""MonitorWorkflow keeps time with durable timers: on the time-skipping test server, hours and
days pass in seconds, and missed runs and timeouts appear exactly when they are due.

(Continue-as-new is tested on the dev server, in test_monitors_workflow.py: the test server
stops skipping time after a run continues as new.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from tests.support.harness import keep_history
from tests.support.monitors import EventReader, Handle, start_monitor, until, view
from treadle.activities.model.activity import ProviderSettings, http_client
from treadle.cli.worker import build_worker
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.web.ping import MonitorService
from treadle.workflows.monitors.models import (
    CheckInSignal,
    CheckInStatus,
    Health,
    MonitorStatus,
    MonitorView,
    StatusChange,
    ViewRequest,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow


@pytest.fixture
async def monitors(
    time_skipping: WorkflowEnvironment, request: pytest.FixtureRequest
) -> AsyncIterator[Monitors]:
    """A worker on a fresh task queue; every monitor started is terminated, then replay-checked
    (and kept for the replay corpus: ``keep_history``): the test server only skips time while no
    workflow task is outstanding, and a monitor left behind without its worker would hold it
    still for the next test."""
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    harness = Monitors(time_skipping.client, task_queue)
    async with (
        http_client() as http,
        build_worker(
            time_skipping.client,
            task_queue=task_queue,
            settings=ProviderSettings.from_env({}),
            http=http,
        ),
    ):
        yield harness
        for handle in harness.handles:
            await handle.terminate(reason="test over")
    for index, handle in enumerate(harness.handles):
        history = await handle.fetch_history()
        await Replayer(
            workflows=WORKFLOWS,
            data_converter=pydantic_data_converter,
            workflow_runner=workflow_runner(),
        ).replay_workflow(history)
        keep_history(f"{request.node.name}-{index}", history)


class Monitors:
    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self.handles: list[Handle] = []

    async def start(self, **fields: Any) -> Handle:
        slug = f"m-{uuid.uuid4().hex[:10]}"
        handle = await start_monitor(
            self.client, self.task_queue, slug, f"{slug}.{'k' * 24}", **fields
        )
        self.handles.append(handle)
        return handle


def statuses(v: MonitorView) -> list[CheckInStatus]:
    """Check-in statuses, oldest first."""
    return [c.status for c in reversed(v.recent)]


@pytest.mark.replay_corpus
async def test_a_silent_monitor_goes_missed_once_and_a_late_ok_heals_it(
    monitors: Monitors, time_skipping: WorkflowEnvironment
) -> None:
    """Hourly, 5 min margin, no check-in: missed at exactly +65 min with one synthetic check-in;
    three more silent days write no more; a late ok heals it; the next silence is a new miss."""
    handle = await monitors.start(margin_minutes=5)
    first = await until(handle, lambda v: v.next_expected is not None)
    created = first.created_at
    assert first.health is Health.UNKNOWN
    assert first.next_expected == created + timedelta(hours=1)
    assert first.missed_after == created + timedelta(minutes=65)

    await time_skipping.sleep(timedelta(minutes=64))
    assert (await view(handle)).health is Health.UNKNOWN

    await time_skipping.sleep(timedelta(minutes=2))
    missed = await until(handle, lambda v: v.health is Health.MISSED)
    [synthetic] = missed.recent
    assert synthetic.status is CheckInStatus.MISSED and synthetic.source.value == "system"
    assert synthetic.created_at == created + timedelta(minutes=65)
    assert synthetic.expected_at == created + timedelta(hours=1)
    assert synthetic.output and "no check-in for the run expected at" in synthetic.output
    assert (missed.total_checkins, missed.total_failures, missed.consecutive_failures) == (1, 1, 1)

    await time_skipping.sleep(timedelta(days=3))
    still = await view(handle)
    now = await time_skipping.get_current_time()
    assert statuses(still) == [CheckInStatus.MISSED]
    assert still.health is Health.MISSED and still.total_failures == 1
    assert still.next_expected is not None and still.next_expected > now - timedelta(minutes=5)

    await handle.signal(MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.OK))
    healed = await until(handle, lambda v: v.health is Health.HEALTHY)
    assert statuses(healed) == [CheckInStatus.MISSED, CheckInStatus.OK]
    assert (healed.consecutive_failures, healed.total_failures, healed.total_checkins) == (0, 1, 2)
    ok = healed.recent[0]
    assert healed.next_expected == ok.created_at + timedelta(hours=1)

    await time_skipping.sleep(timedelta(minutes=66))
    again = await until(handle, lambda v: v.health is Health.MISSED)
    assert statuses(again) == [CheckInStatus.MISSED, CheckInStatus.OK, CheckInStatus.MISSED]
    assert again.stats.week.missed == 2 and again.stats.week.success == 1


@pytest.mark.replay_corpus
async def test_an_in_progress_run_past_its_max_runtime_becomes_a_timeout(
    monitors: Monitors, time_skipping: WorkflowEnvironment
) -> None:
    """Daily, 30 min max runtime: a run that started and never finished is a timeout 30 min
    later (the same check-in, now source system), and the monitor's health says so."""
    handle = await monitors.start(
        schedule={"kind": "interval", "minutes": 24 * 60}, max_runtime_minutes=30
    )
    await handle.signal(MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.IN_PROGRESS))
    started = await until(handle, lambda v: v.open_run is not None)
    assert started.health is Health.UNKNOWN

    await time_skipping.sleep(timedelta(minutes=29))
    assert (await view(handle)).open_run is not None

    await time_skipping.sleep(timedelta(minutes=2))
    timed_out = await until(handle, lambda v: v.health is Health.TIMEOUT)
    [run] = timed_out.recent
    assert run.status is CheckInStatus.TIMEOUT and run.source.value == "system"
    assert run.duration_seconds == 1800
    assert run.output and "within the 30 min max runtime" in run.output
    assert timed_out.open_run is None and timed_out.consecutive_failures == 1


async def test_a_paused_monitor_does_not_go_missed(
    monitors: Monitors, time_skipping: WorkflowEnvironment
) -> None:
    """Paused for three days without a check-in: nothing missed; resumed: the next run is
    expected from the resume on."""
    handle = await monitors.start()
    await until(handle, lambda v: v.next_expected is not None)
    paused = await handle.execute_update(
        MonitorWorkflow.set_status, StatusChange(status=MonitorStatus.PAUSED)
    )
    assert (paused.status, paused.next_expected) == (MonitorStatus.PAUSED, None)
    await time_skipping.sleep(timedelta(days=3))
    quiet = await view(handle)
    assert (quiet.health, quiet.recent) == (Health.UNKNOWN, ())

    resumed = await handle.execute_update(
        MonitorWorkflow.set_status, StatusChange(status=MonitorStatus.ACTIVE)
    )
    now = await time_skipping.get_current_time()
    assert resumed.status is MonitorStatus.ACTIVE and resumed.next_expected is not None
    assert timedelta(minutes=59) < resumed.next_expected - now <= timedelta(minutes=61)
    await time_skipping.sleep(timedelta(minutes=66))
    assert (await until(handle, lambda v: v.health is Health.MISSED)).total_checkins == 1


async def test_bad_check_ins_are_refused_and_recorded_without_harm(
    monitors: Monitors, time_skipping: WorkflowEnvironment
) -> None:
    """Malformed bodies and a ping with a wrong key are kept in the refusal log; the monitor
    keeps running and takes the next good check-in."""
    handle = await monitors.start()
    for body in (
        {"status": "done"},
        {"status": "missed"},
        "not an object",
        {"status": "ok", "source": "ping", "ping_key": f"{handle.id[8:]}.{'w' * 24}"},
    ):
        await handle.signal("checkin", body)
    refused = await until(handle, lambda v: v.refused_total == 4)
    reasons = [r.reason for r in refused.refusals]
    assert "status: Input should be" in reasons[0]
    assert "written by the monitor itself" in reasons[1]
    assert reasons[2] == "body: Input should be a valid dictionary or instance of CheckInSignal"
    assert reasons[3] == "wrong ping key"
    assert "www" not in refused.refusals[3].body  # the key is not logged
    assert (refused.health, refused.total_checkins) == (Health.UNKNOWN, 0)

    await handle.signal(MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.OK))
    assert (await until(handle, lambda v: v.total_checkins == 1)).health is Health.HEALTHY


async def test_a_view_query_computes_statistics_as_of_the_instant_it_is_given(
    monitors: Monitors, time_skipping: WorkflowEnvironment
) -> None:
    """A quiet monitor (no timer for 30 days): 26 hours after its check-in, a query without
    `as_of` still counts the check-in in the day window, since inside a query the workflow's
    clock stands at its latest activation; with `as_of` (what `monitors show` sends) the day window
    is empty and the week still has it."""
    handle = await monitors.start(schedule={"kind": "interval", "minutes": 30 * 24 * 60})
    await handle.signal(MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.OK))
    await until(handle, lambda v: v.health is Health.HEALTHY)
    await time_skipping.sleep(timedelta(hours=26))
    now = await time_skipping.get_current_time()

    stale = await view(handle)
    assert stale.stats.day.success == 1  # the bug `as_of` avoids
    fresh = await handle.query(MonitorWorkflow.view, ViewRequest(as_of=now))
    assert (fresh.stats.day.success, fresh.stats.day.uptime_percent) == (0, None)
    assert (fresh.stats.week.success, fresh.stats.week.uptime_percent) == (1, 100)


async def test_timeouts_and_missed_runs_reach_event_stream_clients(
    monitors: Monitors, time_skipping: WorkflowEnvironment
) -> None:
    """The HTTP service's event stream, with time skipped: an in-progress run past its max
    runtime arrives as `monitor.timeout`, the silence after it as `monitor.missed`, each at the
    instant the monitor settled it."""
    handle = await monitors.start(max_runtime_minutes=10, margin_minutes=5)
    slug = handle.id.removeprefix("monitor-")
    service = MonitorService(time_skipping.client, task_queue=monitors.task_queue, keepalive=1)
    await service.start("127.0.0.1", 0)
    try:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(30, read=60)) as http,
            http.stream("GET", f"{service.url}/monitors/events?monitor={slug}") as response,
        ):
            events = EventReader(response)
            await events.comment(f"watching {slug}")
            await handle.signal(
                MonitorWorkflow.checkin, CheckInSignal(status=CheckInStatus.IN_PROGRESS)
            )
            _, started = await events.event()
            assert started.type.value == "checkin.started"

            await time_skipping.sleep(timedelta(minutes=11))
            _, timeout = await events.event()
            assert (timeout.type.value, timeout.health) == ("monitor.timeout", Health.TIMEOUT)
            assert timeout.at == started.at + timedelta(minutes=10)
            assert timeout.checkin is not None and timeout.checkin.status is CheckInStatus.TIMEOUT

            await time_skipping.sleep(timedelta(minutes=60))
            _, missed = await events.event()
            assert (missed.type.value, missed.health) == ("monitor.missed", Health.MISSED)
            assert missed.at == started.at + timedelta(minutes=65)
            assert missed.checkin is not None and missed.checkin.status is CheckInStatus.MISSED
            assert missed.consecutive_failures == 2
    finally:
        await service.close()
