"""``python -m bench.actions`` counts Temporal Cloud's billable actions as Cloud bills them: from a
history (each retry of an activity though it leaves no event, a child's start on its parent, a
continue-as-new, the markers of one workflow task as one, no ``TemporalChangeVersion`` upsert)
and from the server's heartbeat requests (nothing timed is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from bench.billing import Kind, count_history, run_histories, samples, server_counters
from tests.support.actions_probe import (
    FAILED_ATTEMPTS,
    ActionsProbeChild,
    ActionsProbeWorkflow,
    flaky,
    once,
)

ROOT = Path(__file__).resolve().parents[2]


async def test_a_history_is_counted_as_cloud_bills_it(client: Client) -> None:
    """The probe's chain and its child hold 13 billable actions: two starts (the client's and
    the continue-as-new), two for the child's start, three attempts of the activity that failed
    twice and one of the child's, a timer, a signal, one upsert (the patch's is exempt), and
    two workflow tasks with markers (the patch's, the local activity's)."""
    task_queue = f"actions-{uuid.uuid4().hex[:10]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ActionsProbeWorkflow, ActionsProbeChild],
        activities=[flaky, once],
    ):
        handle = await client.start_workflow(
            ActionsProbeWorkflow.run,
            True,
            id=f"actions-{uuid.uuid4().hex[:10]}",
            task_queue=task_queue,
        )
        await handle.signal(ActionsProbeWorkflow.go)
        assert await handle.result() == 0
    histories = await run_histories(client, handle.id, handle.first_execution_run_id or "")
    assert len(histories) == 3  # the first run, its child, the run it continued as

    tally = count_history(histories[0])
    for events in histories[1:]:
        tally.add(count_history(events))

    assert tally.attempts == {"flaky": FAILED_ATTEMPTS + 1, "once": 1}
    assert dict(tally.actions) == {
        Kind.START: 2,
        Kind.CHILD: 2,
        Kind.ACTIVITY: FAILED_ATTEMPTS + 2,
        Kind.TIMER: 1,
        Kind.SIGNAL: 1,
        Kind.UPSERT: 1,
        Kind.MARKERS: 2,
    }
    assert tally.signals == {"go": 1}
    assert tally.exempt_upserts == 1
    assert tally.total == 13


def test_the_servers_counters_are_read_from_its_metrics_page() -> None:
    """Heartbeat requests of both kinds and queries of one namespace's frontend are summed; other
    namespaces, other services and other operations are not; the action counter is by type."""
    page = "\n".join(
        [
            "# TYPE service_requests counter",
            'service_requests{namespace="default",operation="RecordActivityTaskHeartbeat",'
            'service_name="frontend"} 7',
            'service_requests{namespace="default",operation="RecordActivityTaskHeartbeatById",'
            'service_name="frontend"} 2',
            'service_requests{namespace="default",operation="RecordActivityTaskHeartbeat",'
            'service_name="history"} 7',
            'service_requests{namespace="other",operation="RecordActivityTaskHeartbeat",'
            'service_name="frontend"} 100',
            'service_requests{namespace="default",operation="QueryWorkflow",'
            'service_name="frontend"} 3',
            'service_requests{namespace="default",operation="PollActivityTaskQueue",'
            'service_name="frontend"} 50',
            'action{action_type="grpc_StartWorkflowExecution",namespace="default",'
            'operation="StartWorkflowExecution",service_name="frontend"} 1',
            'action{action_type="command_ScheduleActivityTask",namespace="default",'
            'operation="RespondWorkflowTaskCompleted",service_name="frontend"} 4',
        ]
    )
    assert len(list(samples(page))) == 8
    counters = server_counters(page, "default")
    assert counters.heartbeats == 9
    assert counters.queries == 3
    assert dict(counters.actions) == {
        "command_ScheduleActivityTask": 4,
        "grpc_StartWorkflowExecution": 1,
    }


def test_the_bench_counts_the_floor_exactly_and_treadle_from_both_sources(tmp_path: Path) -> None:
    """At small size: the floor's run of 2 tool steps and the answer holds one model attempt a
    step and one tool attempt a tool step, its start, no heartbeat, signal or timer: 2.00 actions
    a step, $0.10 per 1,000 steps at $50 a million. Treadle's runs count every model call and
    tool call at least once, one start and the heartbeats the server received; every row agrees
    with the server's own action counter, and each case has its heartbeat-timeout row."""
    out = tmp_path / "actions.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.actions",
            "--steps",
            "2",
            "--model-seconds",
            "0.2",
            "--heartbeat-timeout",
            "30",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "$50 per million actions" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["price_per_million_usd"] == 50
    rows = {(row["case"], row["side"]): row for row in figures["rows"]}
    assert set(rows) == {
        (case, side)
        for case in ("0.2 s, whole", "0.2 s, streamed")
        for side in (
            "floor (asks for whole replies)",
            "treadle (defaults)",
            "treadle, heartbeat_timeout 30 s",
        )
    }
    for (case, side), row in rows.items():
        assert row["steps"] == 3, (case, side)
        actions = row["actions"]
        assert actions[Kind.START] == 1, (case, side)
        assert actions.get(Kind.HEARTBEAT, 0) == row["server_actions"].get(
            "grpc_RecordActivityTaskHeartbeat", 0
        )
        # The server's own action counter, less the patch upserts Cloud exempts, agrees.
        assert row["server_check"] == row["per_step"], (case, side)
        if side.startswith("floor"):
            assert row["attempts"] == {"floor_model_call": 3, "floor_write_file": 2}
            assert actions == {Kind.START: 1, Kind.ACTIVITY: 5}
            assert row["per_step"] == 2.0
            assert row["dollars_per_1000_steps"] == 0.1
        else:
            assert row["attempts"]["call_model"] >= 3
            assert row["attempts"]["run_tool"] >= 2
            assert actions[Kind.ACTIVITY] >= 5
            assert row["per_step"] == sum(actions.values()) / 3
