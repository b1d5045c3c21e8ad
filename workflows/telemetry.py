"""Treadle's metrics from workflow code, and the step every workflow log line carries.

Everything here is safe to call from a workflow at any point, replaying or not:

- metrics go through ``workflow.metric_meter()``, which drops what replayed code records (a
  replay after a cache eviction, a restarted worker) and keeps what the first execution does,
  so a step is counted once however often its code runs; the meter reaches the worker's
  Prometheus endpoint (``treadle worker --metrics-port``) and costs nothing when none is configured;
- :func:`step_started` also notes the run's current step in a small table outside the run (by
  run id) that the worker's log formatter (``treadle.logs``) reads, so every line the run logs
  says ``step=N`` without each call passing it. Nothing in the workflow ever reads the table
  back, so it cannot make a replay take another path. This module is passed through the
  sandbox (``worker.PASSTHROUGH_MODULES``): the table must be the one the formatter sees.

Metric names are ``treadle_*``; the README's "Traces, metrics and logs" lists them all. Labels
are kept to values with few distinct members (model, tool, reason, monitor, status): never a
run id or an argument, which would grow the endpoint without bound.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from threading import Lock
from typing import TYPE_CHECKING

from temporalio import workflow

if TYPE_CHECKING:
    from treadle.workflows.agent.messages.models import Price, TokenUsage

__all__ = [
    "CLIENT_QUERIES",
    "HUMAN_WAITS_ENDED",
    "HUMAN_WAITS_STARTED",
    "MODEL_COST",
    "MONITOR_CHECKINS",
    "MONITOR_MISSED_RUNS",
    "MONITOR_TIMEOUTS",
    "STEPS",
    "STUCK_EVENTS",
    "client_query",
    "current_step",
    "human_wait_ended",
    "human_wait_started",
    "model_spent",
    "monitor_event",
    "step_started",
    "stuck",
]

STEPS = "treadle_agent_steps"
STUCK_EVENTS = "treadle_agent_stuck_events"
HUMAN_WAITS_STARTED = "treadle_agent_human_waits_started"
HUMAN_WAITS_ENDED = "treadle_agent_human_waits_ended"
CLIENT_QUERIES = "treadle_agent_client_queries"
MODEL_COST = "treadle_model_cost_usd"
MONITOR_CHECKINS = "treadle_monitor_checkins"
MONITOR_MISSED_RUNS = "treadle_monitor_missed_runs"
MONITOR_TIMEOUTS = "treadle_monitor_timeouts"

_STEPS_KEPT = 10_000
"""Runs whose current step the log table remembers; the oldest noted is forgotten first."""
_steps: OrderedDict[str, int] = OrderedDict()
_steps_lock = Lock()  # workflow tasks of different runs run on different threads


def step_started(step: int) -> None:
    """Count one agent step and make ``step`` the one this run's log lines carry."""
    run_id = workflow.info().run_id
    with _steps_lock:
        _steps[run_id] = step
        _steps.move_to_end(run_id)
        while len(_steps) > _STEPS_KEPT:
            _steps.popitem(last=False)
    _count(STEPS, "Agent steps begun (a model call and the tools it asked for)", {})


def current_step(run_id: str) -> int | None:
    """The step a run last noted with :func:`step_started` (``None``: none yet, or forgotten)."""
    with _steps_lock:
        return _steps.get(run_id)


def stuck(reason: str) -> None:
    """Count one stuck detection (``reason``: the detector that fired, e.g. ``repeated_error``)."""
    _count(STUCK_EVENTS, "Stuck detections, by reason", {"reason": reason})


def human_wait_started(tool: str) -> None:
    """A run began waiting for a human (an approval of a call to ``tool``)."""
    _count(HUMAN_WAITS_STARTED, "Waits for a human that began, by tool", {"tool": tool})


def human_wait_ended(tool: str, outcome: str) -> None:
    """A wait for a human ended (``outcome``: approved, rejected, modified, timed_out...)."""
    _count(
        HUMAN_WAITS_ENDED,
        "Waits for a human that ended, by tool and outcome",
        {"tool": tool, "outcome": outcome},
    )


def client_query(outcome: str) -> None:
    """Count one client query (``outcome``: asked, answered, timed_out)."""
    _count(
        CLIENT_QUERIES,
        "Client queries (the model asked the client), by outcome",
        {"outcome": outcome},
    )


def model_spent(model: str, usage: TokenUsage, prices: Mapping[str, Price]) -> None:
    """Record what one model call cost by the run's price list (nothing when ``model`` has no
    price there); the histogram's ``_sum`` is the spend, its ``_count`` the priced calls."""
    # Here, not at the top: the monitors' workflow uses this module too, without the agent's.
    from treadle.workflows.agent.parts.status import cost

    usd = cost({model: usage}, prices)
    if usd is None:
        return
    workflow.metric_meter().create_histogram_float(
        MODEL_COST, "Cost of model calls in US dollars, by the run's prices", "USD"
    ).record(usd, {"model": model})


_MONITOR_CHECKIN_PREFIX = "checkin."


def monitor_event(monitor: str, event_type: str) -> None:
    """Count a cron monitor's check-in (by status), missed run or timed-out run."""
    if event_type.startswith(_MONITOR_CHECKIN_PREFIX):
        status = event_type.removeprefix(_MONITOR_CHECKIN_PREFIX)
        _count(
            MONITOR_CHECKINS,
            "Cron monitor check-ins, by monitor and status (started, ok, error, refused)",
            {"monitor": monitor, "status": status},
        )
    elif event_type == "monitor.missed":
        _count(MONITOR_MISSED_RUNS, "Cron monitor runs that never checked in", {"monitor": monitor})
    elif event_type == "monitor.timeout":
        _count(MONITOR_TIMEOUTS, "Cron monitor runs over their max runtime", {"monitor": monitor})


def _count(name: str, description: str, labels: Mapping[str, str | int | float | bool]) -> None:
    workflow.metric_meter().create_counter(name, description).add(1, labels)
