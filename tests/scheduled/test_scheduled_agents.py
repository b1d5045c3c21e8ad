"""Scheduled agents (`treadle schedule ...`) as an operator runs them: real processes against
the dev server, the harness's worker running the scheduled runs with the scripted model, and
every run's check-ins reaching the cron monitor created with the schedule."""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import (
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tests.support.harness import Harness, keep_history, replayer, scripted_worker
from tests.support.jobs import eventually
from tests.support.monitors import until
from tests.support.processes import refusal, run_cli
from tests.support.threads import start_thread
from treadle import agent_schedules
from treadle.activities import thread_turns, threads
from treadle.activities.model.activity import http_client
from treadle.workflows.agent.messages.models import (
    AgentResult,
    AgentStatus,
    ApproveSignal,
    RunStatus,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.monitors.models import (
    CheckIn,
    CheckInSource,
    CheckInStatus,
    Health,
    monitor_workflow_id,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow
from treadle.workflows.scheduled.models import ScheduledRunResult, agent_run_id, schedule_id

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "nightly notes"}}


class Schedules:
    """`treadle schedule ...` against the harness's server and task queue."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.client = harness.client
        self.names: list[str] = []

    def name(self) -> str:
        name = f"sched-{uuid.uuid4().hex[:10]}"
        self.names.append(name)
        return name

    async def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await run_cli(*self.harness.cli_args(), "schedule", *args)

    async def ok(self, *args: str) -> str:
        done = await self(*args)
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done.stdout

    async def refused(self, *args: str) -> str:
        """Exit code 2 and exactly one line on stderr; returns it."""
        return refusal(await self(*args))

    async def create(self, name: str, model: str, *options: str) -> str:
        return await self.ok(
            "create",
            name,
            "Write tonight's notes.",
            "--model",
            model,
            "--workspace",
            str(self.harness.workspace),
            *options,
        )

    def monitor(self, name: str) -> Any:
        return self.client.get_workflow_handle_for(MonitorWorkflow.run, monitor_workflow_id(name))

    async def slot(self, name: str, count: int = 1) -> str:
        """The workflow id of the schedule's ``count``-th started slot, once it has one."""

        async def started() -> list[str]:
            recent = (await self.client.get_schedule_handle(schedule_id(name)).describe()).info
            return [a.action.workflow_id for a in recent.recent_actions]  # type: ignore[attr-defined]

        ids = await eventually(lambda: _at_least(started, count))
        return str(ids[count - 1])

    async def agent_run(self, slot: str) -> Any:
        """The slot's agent run, once the slot has started it."""
        handle = self.client.get_workflow_handle(agent_run_id(slot))

        async def started() -> bool:
            try:
                await handle.describe()
            except RPCError:
                return False
            return True

        await eventually(started)
        return handle

    async def replay_and_keep(self, workflow_id: str, name: str) -> None:
        """Replay the slot's history through today's code; keep it for test_replay.py."""
        history = await self.client.get_workflow_handle(workflow_id).fetch_history()
        await replayer().replay_workflow(history)
        keep_history(name, history)

    async def cleanup(self) -> None:
        for name in self.names:
            with contextlib.suppress(RPCError):
                await agent_schedules.delete(self.client, name)


async def _at_least(fetch: Callable[[], Any], count: int) -> Any:
    found = await fetch()
    return found if len(found) >= count else None


@pytest.fixture
async def schedules(harness: Harness) -> AsyncIterator[Schedules]:
    s = Schedules(harness)
    try:
        yield s
    finally:
        await s.cleanup()


def _done(view: Any) -> CheckIn | None:
    """The newest check-in, when it is final (ok or error)."""
    if not view.recent or view.recent[0].status is CheckInStatus.IN_PROGRESS:
        return None
    return view.recent[0]  # type: ignore[no-any-return]


async def _nothing_made(schedules: Schedules, name: str) -> None:
    """Neither the schedule ``name`` nor its monitor exists."""
    for made in (schedules.client.get_schedule_handle(schedule_id(name)), schedules.monitor(name)):
        with pytest.raises(RPCError) as missing:
            await made.describe()
        assert missing.value.status is RPCStatusCode.NOT_FOUND, made


@pytest.mark.replay_corpus
async def test_a_scheduled_agent_runs_and_its_check_ins_reach_its_monitor(
    schedules: Schedules,
) -> None:
    """`schedule create` makes a Temporal Schedule (SKIP overlap, 5-minute catch-up window)
    and a monitor with the same times; a fired slot runs the agent as a child run, checks in
    in_progress then ok with the answer and the duration; creating it again changes nothing,
    and creating it with other settings is refused."""
    model = schedules.harness.script({"content": "Notes written."})
    name = schedules.name()
    created = await schedules.create(name, model, "--every", "1h", "--max-runtime", "30")
    assert created.startswith(f"Created scheduled agent {name}: every 60 min\n")
    assert (
        f"schedule:  {schedule_id(name)} (overlap skip, catch-up window 5m, jitter 0s)" in created
    )

    described = await schedules.client.get_schedule_handle(schedule_id(name)).describe()
    assert described.schedule.policy.overlap is ScheduleOverlapPolicy.SKIP
    assert described.schedule.policy.catchup_window == timedelta(minutes=5)
    assert described.schedule.spec.intervals == [ScheduleIntervalSpec(every=timedelta(hours=1))]
    assert described.info.next_action_times
    monitor = schedules.monitor(name)
    view = await until(monitor, lambda v: v.health is Health.UNKNOWN)
    assert (view.schedule_text, view.max_runtime_minutes) == ("every 60 min", 30)

    again = await schedules.create(name, model, "--every", "1h", "--max-runtime", "30")
    assert again.startswith(f"Unchanged: scheduled agent {name}")
    other = await schedules.refused(
        "create", name, "Another task.", "--every", "2h", "--workspace", "."
    )
    assert other == (
        f"error: scheduled agent '{name}' already exists with other settings; "
        f"delete it first (treadle schedule delete {name})"
    )

    await schedules.ok("trigger", name)
    view = await until(monitor, lambda v: _done(v) is not None)
    (checkin,) = view.recent
    assert (checkin.status, checkin.source, checkin.output) == (
        CheckInStatus.OK,
        CheckInSource.SDK,
        "Notes written.",
    )
    # One record from in_progress to ok: the run checked in when it started.
    assert checkin.started_at is not None and checkin.finished_at is not None
    assert checkin.duration_seconds is not None and checkin.duration_seconds >= 0
    assert (view.health, view.total_checkins, view.open_run) == (Health.HEALTHY, 1, None)

    slot = await schedules.slot(name)
    assert slot.startswith(f"{schedule_id(name)}-")
    outcome = await schedules.client.get_workflow_handle(
        slot, result_type=ScheduledRunResult
    ).result()
    assert (outcome.status, outcome.answer, outcome.agent_run_id) == (
        RunStatus.DONE,
        "Notes written.",
        agent_run_id(slot),
    )
    agent: AgentResult = await schedules.client.get_workflow_handle(
        agent_run_id(slot), result_type=AgentResult
    ).result()
    assert agent.answer == "Notes written."
    await schedules.replay_and_keep(slot, "scheduled-agent-checked-in-ok")

    listed = json.loads(await schedules.ok("list", "--json"))
    (row,) = [r for r in listed if r["name"] == name]
    assert (row["state"], row["health"], row["schedule"]) == ("active", "healthy", "every 60 min")


@pytest.mark.replay_corpus
async def test_a_run_waiting_for_approval_is_in_progress_and_the_next_slot_is_skipped(
    schedules: Schedules,
) -> None:
    """While a scheduled run waits for approval its monitor shows it in progress and
    `schedule show` prints its approval commands; a slot that comes meanwhile is skipped
    (overlap skip); approving finishes the run, which checks in ok."""
    model = schedules.harness.script({"tool_calls": [WRITE]}, {"content": "written"})
    name = schedules.name()
    await schedules.create(name, model, "--cron", "0 2 * * *", "--require-approval", "write_file")
    await schedules.ok("trigger", name)
    slot = await schedules.slot(name)
    run_handle = await schedules.agent_run(slot)
    status: AgentStatus = await schedules.harness.wait_for_state(run_handle, "WaitingForHuman")
    (pending,) = status.pending_approvals

    view = await until(schedules.monitor(name), lambda v: v.open_run is not None)
    assert view.recent[0].status is CheckInStatus.IN_PROGRESS
    assert view.recent[0].output == f"agent run {agent_run_id(slot)}: Write tonight's notes."

    shown = await schedules.ok("show", name)
    assert f"running: {agent_run_id(slot)} (WaitingForHuman, step 1)" in shown
    assert "waiting for approval: write_file" in shown
    # The approval commands reach the server `show` was pointed at.
    address = schedules.client.service_client.config.target_host
    approve = f"treadle --address {address} approve {agent_run_id(slot)} --call {pending.call_id}"
    assert any(line.strip().endswith(approve) for line in shown.splitlines()), shown
    assert "schedule:    cron '0 2 * * *' (UTC); overlap skip" in shown

    await schedules.ok("trigger", name)
    handle = schedules.client.get_schedule_handle(schedule_id(name))

    async def skipped() -> bool:
        return (await handle.describe()).info.num_actions_skipped_overlap == 1

    await eventually(skipped)
    info = (await handle.describe()).info
    assert (info.num_actions, len(info.running_actions)) == (1, 1)

    approved = await run_cli(
        *schedules.harness.cli_args(), "approve", agent_run_id(slot), "--call", pending.call_id
    )
    assert approved.returncode == 0, approved.stderr
    view = await until(schedules.monitor(name), lambda v: _done(v) is not None)
    assert (view.recent[0].status, view.recent[0].output) == (CheckInStatus.OK, "written")
    assert (schedules.harness.workspace / "notes.md").read_text() == "nightly notes"
    await schedules.replay_and_keep(slot, "scheduled-agent-waited-for-approval")


@pytest.mark.replay_corpus
async def test_a_failing_run_marks_its_monitor_failing(schedules: Schedules) -> None:
    """A run that ends in error checks in error with the reason: the monitor turns failing,
    and the slot's workflow fails (red on the Schedules page) with the run's outcome."""
    refused = {"status": 400, "body": {"error": {"message": "model not allowed"}}}
    model = schedules.harness.script({"content": "never", "errors": [refused]})
    name = schedules.name()
    await schedules.create(name, model, "--every", "30m")
    await schedules.ok("trigger", name)

    view = await until(schedules.monitor(name), lambda v: _done(v) is not None)
    checkin = view.recent[0]
    assert checkin.status is CheckInStatus.ERROR
    assert checkin.output is not None and "HTTP 400: model not allowed" in checkin.output
    assert (view.health, view.consecutive_failures) == (Health.FAILING, 1)

    slot = await schedules.slot(name)
    with pytest.raises(WorkflowFailureError) as failed:
        await schedules.client.get_workflow_handle(slot).result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ScheduledRunFailed"
    outcome = ScheduledRunResult.model_validate(cause.details[0])
    assert outcome.status is RunStatus.ERROR
    await schedules.replay_and_keep(slot, "scheduled-agent-failed-run")

    listed = json.loads(await schedules.ok("list", "--json"))
    (row,) = [r for r in listed if r["name"] == name]
    assert (row["health"], row["consecutive_failures"]) == ("failing", 1)


async def test_pause_unpause_and_delete(schedules: Schedules) -> None:
    """Pause stops the schedule (its monitor keeps watching), unpause starts it again, and
    delete removes both the schedule and its monitor."""
    model = schedules.harness.script({"content": "ok"})
    name = schedules.name()
    await schedules.create(name, model, "--cron", "30 2 * * *", "--timezone", "Europe/Berlin")
    paused = await schedules.ok("pause", name, "--note", "holiday")
    assert paused.startswith(f"Paused scheduled agent {name} (holiday). Its monitor keeps")
    described = await schedules.client.get_schedule_handle(schedule_id(name)).describe()
    assert (described.schedule.state.paused, described.schedule.state.note) == (True, "holiday")
    shown = await schedules.ok("show", name)
    assert "  state:       paused (holiday)" in shown
    assert "  next runs:   -" in shown
    view = await until(schedules.monitor(name), lambda v: v.next_expected is not None)
    assert view.status.value == "active"  # still expecting runs: a paused schedule is missed

    await schedules.ok("unpause", name)
    described = await schedules.client.get_schedule_handle(schedule_id(name)).describe()
    assert not described.schedule.state.paused
    assert described.schedule.spec.time_zone_name == "Europe/Berlin"

    assert (await schedules.ok("delete", name)).startswith(f"Deleted scheduled agent {name}")
    with pytest.raises(RPCError) as missing:
        await schedules.client.get_schedule_handle(schedule_id(name)).describe()
    assert missing.value.status is RPCStatusCode.NOT_FOUND
    monitor = await schedules.monitor(name).describe()
    assert monitor.status is WorkflowExecutionStatus.COMPLETED
    line = await schedules.refused("show", name)
    assert line == f"error: no scheduled agent '{name}' in namespace default " + (
        "(see: treadle schedule list)"
    )


async def test_bad_input_is_refused_before_anything_is_created(schedules: Schedules) -> None:
    """Bad cron, time zone, interval, durations or run config: one line, exit 2, and neither
    a schedule nor a monitor exists afterwards."""
    name = schedules.name()
    config = schedules.harness.workspace / "config.yaml"
    config.write_text("max_steps: 0\n")

    async def refused(*options: str) -> str:
        return await schedules.refused(
            "create", name, "A task.", "--workspace", str(schedules.harness.workspace), *options
        )

    assert "cron expression '61 * * * *'" in await refused("--cron", "61 * * * *")
    assert "has 3 field(s)" in await refused("--cron", "* * *")
    assert "unknown time zone 'Moon/Base'" in await refused(
        "--cron", "0 2 * * *", "--timezone", "Moon/Base"
    )
    assert "--timezone goes with --cron" in await refused("--every", "1h", "--timezone", "UTC")
    assert "--every 90s: use whole minutes" in await refused("--every", "90s")
    assert "duration 'soon' is not like 90s" in await refused("--every", "soon")
    assert "--catchup-window 5s: at least 10s" in await refused(
        "--every", "1h", "--catchup-window", "5s"
    )
    assert "jitter 10m must be shorter than the monitor's margin" in await refused(
        "--every", "1h", "--jitter", "10m"
    )
    assert "invalid run: max_steps" in await refused("--every", "1h", "--config", str(config))
    assert "invalid name 'Bad'" in await schedules.refused(
        "create", "Bad", "A task.", "--every", "1h"
    )
    for command in ("show", "pause", "unpause", "trigger", "delete"):
        line = await schedules.refused(command, name)
        assert line.startswith(f"error: no scheduled agent '{name}'")
    await _nothing_made(schedules, name)


async def test_a_name_taken_by_another_monitor_is_refused(schedules: Schedules) -> None:
    """A cron monitor of the same name that watches something else is not taken over: the
    create is refused and no schedule is left behind."""
    name = schedules.name()
    made = await run_cli(
        *schedules.harness.cli_args(), "monitors", "create", name, "--interval", "60"
    )
    assert made.returncode == 0, made.stderr
    try:
        line = await schedules.refused(
            "create", name, "A task.", "--every", "1h", "--workspace", "."
        )
        assert line.startswith(f"error: a cron monitor '{name}' already exists")
        with pytest.raises(RPCError):
            await schedules.client.get_schedule_handle(schedule_id(name)).describe()
    finally:
        await schedules.monitor(name).terminate("test over")


def test_printed_commands_keep_the_profile_and_the_server_they_were_given() -> None:
    """`schedule show`'s approval commands and follow-ups reach the server the command did:
    the profile is carried, and what was given beside it."""
    import argparse
    from types import SimpleNamespace

    from treadle.cli import shell
    from treadle.cli.scheduled_agents import commands as schedules

    client: Any = SimpleNamespace(namespace="prod-ns")
    args = argparse.Namespace(
        profile="prod", address=None, namespace=None, task_queue=schedules.TASK_QUEUE
    )
    assert schedules._connection_options(client, args) == ["--profile", "prod"]
    approve = shell.runnable("treadle approve run-1 --call c1")
    assert shell.connected(approve, ["--profile", "prod"]).endswith(
        "treadle --profile prod approve run-1 --call c1"
    )
    assert "--profile prod" in shell.starter(
        "schedule", "show", "n", **schedules._where(client, args)
    )
    args = argparse.Namespace(
        profile=None, address="10.0.0.5:7233", namespace=None, task_queue=schedules.TASK_QUEUE
    )
    assert schedules._connection_options(client, args) == [
        "--address",
        "10.0.0.5:7233",
        "--namespace",
        "prod-ns",
    ]
    # Not a treadle command: left as it is.
    assert shell.connected("temporal workflow list", ["--profile", "p"]) == "temporal workflow list"


# --------------------------------------------------------------------------------------------
# Scheduled messages: each slot sends an existing thread its next message
# --------------------------------------------------------------------------------------------


async def _thread(harness: Harness, model: str, **options: Any) -> WorkflowHandle[Any, Any]:
    """A thread (``start_thread``), once it has answered its first message and waits."""
    handle = await start_thread(harness, model, **options)
    await harness.wait_for_state(handle, State.WAITING_FOR_USER_INPUT.value)
    return handle


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class _BadDeploy:
    """What a worker deployed with code that cannot replay the thread runs under its name:
    every query of the thread fails (nondeterminism), or, for a run it started, finds no
    ``state`` handler."""

    @workflow.run
    async def run(self, input: Any) -> None:
        await workflow.wait_condition(lambda: False)


@pytest.mark.replay_corpus
async def test_a_scheduled_message_reaches_its_thread_and_its_answer_the_monitor(
    schedules: Schedules,
) -> None:
    """`create --thread` makes a schedule whose slots send TASK to the running thread: the
    monitor sees in_progress while the thread's turn waits for approval (`show` prints the
    thread's approval commands, a slot meanwhile is skipped), then ok with the thread's answer;
    the thread keeps waiting for its next message, with the message in its conversation."""
    harness = schedules.harness
    model = harness.script(
        {"content": "Ready."}, {"tool_calls": [WRITE]}, {"content": "Notes written."}
    )
    thread = await _thread(harness, model, require_approval=["write_file"])
    name = schedules.name()
    created = await schedules.ok(
        "create", name, "Write tonight's notes.", "--thread", thread.id, "--every", "1h",
        "--max-runtime", "30",
    )  # fmt: skip
    assert created.startswith(f"Created scheduled agent {name}: every 60 min\n")
    assert f"  thread:    {thread.id} (each slot sends it TASK, and waits)\n" in created

    await schedules.ok("trigger", name)
    status: AgentStatus = await harness.wait_for_state(thread, State.WAITING_FOR_HUMAN.value)
    (pending,) = status.pending_approvals
    view = await until(schedules.monitor(name), lambda v: v.open_run is not None)
    assert view.recent[0].status is CheckInStatus.IN_PROGRESS
    assert view.recent[0].output == f"message to thread {thread.id}: Write tonight's notes."

    shown = await schedules.ok("show", name)
    assert shown.startswith(f"{name}: scheduled message to thread {thread.id}\n")
    assert "  message:     Write tonight's notes.\n" in shown
    assert f"running: {thread.id} (WaitingForHuman, step 2)" in shown
    approve = f"approve {thread.id} --call {pending.call_id}"
    assert any(line.strip().endswith(approve) for line in shown.splitlines()), shown

    handle = schedules.client.get_schedule_handle(schedule_id(name))
    await handle.trigger()

    async def skipped() -> bool:
        return (await handle.describe()).info.num_actions_skipped_overlap == 1

    await eventually(skipped)
    await thread.signal(AgentWorkflow.approve, ApproveSignal(call_id=pending.call_id))
    view = await until(schedules.monitor(name), lambda v: _done(v) is not None)
    (checkin,) = view.recent
    assert (checkin.status, checkin.output) == (CheckInStatus.OK, "Notes written.")
    assert checkin.duration_seconds is not None and view.health is Health.HEALTHY
    assert (harness.workspace / "notes.md").read_text() == "nightly notes"

    slot = await schedules.slot(name)
    outcome = await schedules.client.get_workflow_handle(
        slot, result_type=ScheduledRunResult
    ).result()
    assert (outcome.agent_run_id, outcome.status, outcome.answer) == (
        thread.id,
        RunStatus.DONE,
        "Notes written.",
    )
    after: AgentStatus = await thread.query(AgentWorkflow.state)
    assert after.state is State.WAITING_FOR_USER_INPUT
    user_messages = [
        m["content"] for m in harness.requests(model)[-1]["messages"] if m["role"] == "user"
    ]
    assert user_messages[-1] == "Write tonight's notes."
    await schedules.replay_and_keep(slot, "scheduled-message-answered")

    listed = json.loads(await schedules.ok("list", "--json"))
    (row,) = [r for r in listed if r["name"] == name]
    assert (row["thread_id"], row["task"], row["health"]) == (
        thread.id,
        "Write tonight's notes.",
        "healthy",
    )
    await thread.execute_update(AgentWorkflow.close)


@pytest.mark.replay_corpus
async def test_a_message_whose_turn_fails_or_whose_thread_ended_checks_in_error(
    schedules: Schedules,
) -> None:
    """A slot whose message ends the thread in error, and a later slot that finds the thread
    ended, each check in error with the reason: the monitor turns failing and each slot's
    workflow fails (ScheduledRunFailed) instead of waiting."""
    harness = schedules.harness
    refused = {"status": 400, "body": {"error": {"message": "model not allowed"}}}
    model = harness.script({"content": "Ready."}, {"content": "never", "errors": [refused]})
    thread = await _thread(harness, model)
    name = schedules.name()
    await schedules.ok("create", name, "Summarise the day.", "--thread", thread.id, "--every", "1h")
    handle = schedules.client.get_schedule_handle(schedule_id(name))

    await handle.trigger()
    view = await until(schedules.monitor(name), lambda v: _done(v) is not None)
    first = view.recent[0]
    assert first.status is CheckInStatus.ERROR
    assert first.output is not None
    assert first.output.startswith(
        f"message to thread {thread.id}: its turn ended the thread Error: model call failed"
    )
    assert "HTTP 400: model not allowed" in first.output
    slot = await schedules.slot(name)
    with pytest.raises(WorkflowFailureError) as failed:
        await schedules.client.get_workflow_handle(slot).result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ScheduledRunFailed"
    assert ScheduledRunResult.model_validate(cause.details[0]).status is RunStatus.ERROR
    await schedules.replay_and_keep(slot, "scheduled-message-turn-failed")

    await handle.trigger()
    view = await until(
        schedules.monitor(name), lambda v: v.total_checkins == 2 and _done(v) is not None
    )
    assert (view.recent[0].status, view.recent[0].output) == (
        CheckInStatus.ERROR,
        f"message to thread {thread.id}: the thread {thread.id} has ended (completed)",
    )
    assert (view.health, view.consecutive_failures) == (Health.FAILING, 2)
    second = await schedules.slot(name, 2)
    with pytest.raises(WorkflowFailureError):
        await schedules.client.get_workflow_handle(second).result()
    await schedules.replay_and_keep(second, "scheduled-message-thread-ended")

    # Created now, the same schedule would be refused: the thread no longer runs.
    other = await schedules.refused(
        "create", schedules.name(), "Summarise the day.", "--thread", thread.id, "--every", "1h"
    )
    assert other == f"error: the thread {thread.id} has ended (completed)"


async def test_a_scheduled_message_without_a_running_thread_or_with_run_options_is_refused(
    schedules: Schedules,
) -> None:
    """`create --thread` with a run option, an unknown id, a single-task run's id, or the id
    of a thread whose worker cannot answer its state query: one line, exit 2, and neither a
    schedule nor a monitor exists afterwards."""
    harness = schedules.harness
    name = schedules.name()

    async def refused(thread_id: str, *options: str) -> str:
        return await schedules.refused(
            "create", name, "Summarise.", "--thread", thread_id, "--every", "1h", *options
        )

    assert await refused("any", "--model", "openai:x", "--max-steps", "3") == (
        "error: --model, --max-steps go with a new run, not with --thread: the thread keeps "
        "the model, workspace and config it was started with"
    )
    assert await refused("any", "--workspace", ".") == (
        "error: --workspace goes with a new run, not with --thread: the thread keeps the model, "
        "workspace and config it was started with"
    )
    assert await refused("no-such-thread") == "error: no thread with id 'no-such-thread'"
    run = await harness.start(
        harness.script({"tool_calls": [WRITE]}, {"content": "done"}),
        require_approval=["write_file"],
    )
    await harness.wait_for_state(run, State.WAITING_FOR_HUMAN.value)
    assert await refused(run.id) == f"error: {run.id!r} is a single-task run, not a thread"
    await run.terminate("test over")
    await _nothing_made(schedules, name)

    # A running "thread" whose worker cannot answer its state query (the query fails rather
    # than times out): refused like the others, not reported as an unexpected error (exit 1).
    impostor = f"impostor-{uuid.uuid4().hex[:10]}"
    async with Worker(harness.client, task_queue=impostor, workflows=[_BadDeploy]):
        thread = await harness.client.start_workflow(
            "AgentWorkflow", {"task": "t"}, id=impostor, task_queue=impostor
        )
        try:
            line = await refused(thread.id)
        finally:
            await thread.terminate("test over")
    assert line.startswith(f"error: the thread {thread.id} could not answer its state query (")
    await _nothing_made(schedules, name)


@pytest.mark.replay_corpus
async def test_a_thread_terminated_while_a_slot_waits_for_its_answer_checks_in_error_at_once(
    schedules: Schedules,
) -> None:
    """A slot waits for the answer of a thread whose worker is replaced by one that cannot
    replay it (every query fails), and the thread is terminated: the slot checks in error
    naming the termination within seconds, instead of retrying the failed query until the
    answer timeout (a day) and reporting no answer."""
    harness = schedules.harness
    model = harness.script({"content": "Ready."}, {"tool_calls": [WRITE]})
    queue = f"threads-{uuid.uuid4().hex[:10]}"
    name = schedules.name()
    async with http_client() as http, scripted_worker(harness.client, queue, harness.models, http):
        thread = await _thread(harness, model, task_queue=queue, require_approval=["write_file"])
        await schedules.ok(
            "create", name, "Write the notes.", "--thread", thread.id, "--every", "1h"
        )
        await schedules.client.get_schedule_handle(schedule_id(name)).trigger()
        await harness.wait_for_state(thread, State.WAITING_FOR_HUMAN.value)
        await until(schedules.monitor(name), lambda v: v.open_run is not None)
    async with Worker(harness.client, task_queue=queue, workflows=[_BadDeploy]):
        await thread.terminate("test: terminated while a slot waits for its answer")
        # until()'s deadline is a watchdog against a slot that keeps asking (a day), not a
        # measured duration: the check-in's words below say it saw the termination.
        view = await until(schedules.monitor(name), lambda v: _done(v) is not None, timeout=60)
    checkin = view.recent[0]
    assert checkin.status is CheckInStatus.ERROR
    assert checkin.output is not None
    assert checkin.output.startswith(
        f"message to thread {thread.id}: the thread {thread.id} ended (terminated) with no "
        "answer to read: its state query fails ("
    ), checkin.output
    assert "Nondeterminism" in checkin.output
    slot = await schedules.slot(name)
    with pytest.raises(WorkflowFailureError) as failed:
        await schedules.client.get_workflow_handle(slot).result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ScheduledRunFailed"
    await schedules.replay_and_keep(slot, "scheduled-message-thread-terminated")


def test_a_slot_waiting_for_an_answer_asks_the_thread_less_and_less_often() -> None:
    """Every second for the first ten seconds (a quick turn is seen at once), then doubling to
    one query in 15 s: a thread left waiting for an approval for hours, evicted from its
    worker's cache, replays its history for each query. A person's `chat` keeps its pace."""
    delays = thread_turns.poll_delays(threads.ANSWER_POLL_SECONDS, threads.ANSWER_POLL_MAX_SECONDS)
    assert list(itertools.islice(delays, 16)) == [1.0] * 10 + [2.0, 4.0, 8.0] + [15.0] * 3
    assert set(itertools.islice(thread_turns.poll_delays(thread_turns.POLL_SECONDS), 100)) == {0.2}


async def test_a_not_found_from_a_thread_that_still_runs_is_retried_not_final(
    harness: Harness,
) -> None:
    """The NOT_FOUND Temporal answers a ``send`` that reached a thread's run as it continued
    as new is no reason to give up while the thread runs: ``why_not`` raises it again, and
    ``send_to_thread`` fails the attempt retryable, so the next one reaches the new run. Once
    the thread has ended, the same error gets its reason."""
    model = harness.script({"content": "Ready."})
    thread = await _thread(harness, model)
    raced = RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
    with pytest.raises(RPCError) as again:
        await thread_turns.why_not(thread, raced)
    assert again.value is raced
    await thread.execute_update(AgentWorkflow.close)
    await thread.result()
    assert (
        await thread_turns.why_not(thread, raced) == f"the thread {thread.id} has ended (completed)"
    )
