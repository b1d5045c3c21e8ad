"""The worker's log lines, with their fields: text by default, JSON lines on request.

Treadle logs stable event names with their fields in ``extra`` (``agent.transition`` with
``from``, ``event`` and ``to``; ``model.call.completed`` with ``model`` and ``total_tokens``).
A plain ``logging`` format prints only the name; these formatters print the fields too:

    ... INFO temporalio.workflow agent.transition workflow_id=run-1 run_id=0f4c… step=3
        workflow_type=AgentWorkflow from=Planning event=ToolsRequested to=Acting
    {"time": "...", "level": "INFO", "logger": "temporalio.workflow",
     "event": "agent.transition", "workflow_id": "run-1", ..., "event_field": "ToolsRequested"}

(each one line in the log; a field named like one of the line's own keys gets ``_field``).
Every line logged from workflow or activity code carries the run's ``workflow_id`` and ``run_id``
(the SDK's loggers put them in ``extra``) and its ``step``: a workflow's from
``treadle.workflows.telemetry.current_step``, an activity's from
``treadle.activities.telemetry.current_step``,
unless the call names one itself. Expected errors log one line: a traceback is printed for an
unexpected exception only, not for a deliberate ``ApplicationError`` (see :func:`expected`).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

from treadle.activities import telemetry as activity_telemetry
from treadle.workflows import telemetry as workflow_telemetry

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "expected",
    "fields",
]

LOG_FORMATS = ("text", "json")

# What every LogRecord has; anything else on a record came from a call's ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)
_TEMPORAL_WORKFLOW = "temporal_workflow"
_TEMPORAL_ACTIVITY = "temporal_activity"
_TEMPORAL_UPDATE = "temporal_update"


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's fields: the run's ids and step first, then what the call passed."""
    out: dict[str, Any] = {}
    extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
    wf = extra.pop(_TEMPORAL_WORKFLOW, None)
    act = extra.pop(_TEMPORAL_ACTIVITY, None)
    update = extra.pop(_TEMPORAL_UPDATE, None)
    if isinstance(wf, Mapping):
        out["workflow_id"] = wf.get("workflow_id")
        out["run_id"] = wf.get("run_id")
        out["workflow_type"] = wf.get("workflow_type")
        step = workflow_telemetry.current_step(str(wf.get("run_id")))
        if step is not None:
            out["step"] = step
    elif isinstance(act, Mapping):
        out["workflow_id"] = act.get("workflow_id")
        out["run_id"] = act.get("workflow_run_id")
        out["activity_type"] = act.get("activity_type")
        out["attempt"] = act.get("attempt")
        step = activity_telemetry.current_step()
        if step is not None:
            out["step"] = step
    if isinstance(update, Mapping):
        out["update"] = update.get("update_name")
    out.update(extra)  # a call's own ``step`` wins over the noted one
    return out


def expected(record: logging.LogRecord) -> logging.LogRecord:
    """``record``, or a copy without its traceback when the error is a deliberate one.

    An ``ApplicationError`` is raised on purpose (a provider's 503, a hook that is busy): the
    SDK still logs its traceback when an activity fails with one, which says nothing more than
    its type and message, so those go on the line as ``error=`` instead.
    """
    exc = record.exc_info[1] if record.exc_info else None
    if not isinstance(exc, ApplicationError):
        return record
    copy = logging.makeLogRecord(vars(record))
    copy.exc_info, copy.exc_text = None, None
    copy.error = f"{exc.type or type(exc).__name__}: {' '.join(exc.message.split())}"
    return copy


class TextFormatter(logging.Formatter):
    """``time LEVEL logger event key=value ...``; values with spaces are quoted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return super().format(expected(record))

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        pairs = " ".join(f"{k}={_text(v)}" for k, v in fields(record).items() if v is not None)
        return f"{line} {pairs}" if pairs else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``event``, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        record = expected(record)
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in fields(record).items():
            # A field may not hide the line's own keys ("event" is agent.transition's too).
            line[f"{key}_field" if key in line else key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) at ``level`` in ``fmt`` (``text`` or ``json``), for the whole
    process; replaces handlers an earlier call installed."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The ids are fields now; the SDK's loggers would also append them to every message.
    workflow.logger.workflow_info_on_message = False
    activity.logger.activity_info_on_message = False


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if text == "" or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text
