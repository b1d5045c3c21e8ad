"""What a ping does: read its check-in fields, check its key, signal the monitor's workflow.

No HTTP here: the service (``treadle.web.ping``) hands over the ping's parts and turns the
refusals below into status codes.

A ping needs no worker: the key is ``<slug>.<secret>``, so the slug names the monitor's workflow,
whose memo holds the key's SHA-256 to check it against (``describe`` is answered by the server
alone); the check-in is then a signal, which Temporal keeps until a worker processes it. The
workflow checks the key again.

    PingRefused             a ping that was not handed to Temporal, with a one-line message
    ├── BadPing             malformed exit code, body or field
    ├── UnknownKey          no running monitor has this key
    └── TemporalUnavailable Temporal did not answer or take the signal
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from treadle.workflows.base import describe_errors
from treadle.workflows.monitors.models import (
    MAX_OUTPUT_BYTES,
    MEMO_PING_KEY_DIGEST,
    CheckInSignal,
    CheckInSource,
    CheckInStatus,
    monitor_workflow_id,
    ping_key_digest,
    split_ping_key,
    truncate_output,
)
from treadle.workflows.monitors.workflow import MonitorWorkflow

__all__ = ["BadPing", "PingRefused", "TemporalUnavailable", "UnknownKey", "ping"]

log = logging.getLogger("treadle.monitor_http")

TEMPORAL_TIMEOUT = timedelta(seconds=10)
BODY_FIELDS = frozenset({"output", "exit_code", "duration_seconds"})


class PingRefused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadPing(PingRefused):
    pass


class UnknownKey(PingRefused):
    def __init__(self) -> None:
        super().__init__("unknown ping key")


class TemporalUnavailable(PingRefused):
    pass


async def ping(
    client: Client,
    key: str,
    status: CheckInStatus,
    *,
    exit_codes: Sequence[str],
    content_type: str,
    body: bytes,
) -> dict[str, Any]:
    """Check the key, build the check-in, and signal the monitor's workflow; the answer."""
    fields = checkin_fields(status, exit_codes, content_type, body)
    slug = await verify_key(client, key)
    try:
        signal = CheckInSignal(
            source=CheckInSource.PING, sent_at=datetime.now(UTC), ping_key=key, **fields
        )
    except ValidationError as exc:
        raise BadPing(describe_errors(exc)) from None
    handle = client.get_workflow_handle(monitor_workflow_id(slug))
    try:
        await handle.signal(MonitorWorkflow.checkin, signal, rpc_timeout=TEMPORAL_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:  # deleted since verify_key
            raise UnknownKey from None
        raise TemporalUnavailable(f"Temporal did not take the check-in: {exc.message}") from None
    return {
        "accepted": True,
        "monitor": slug,
        "status": signal.status.value,
        "exit_code": signal.exit_code,
        "sent_at": signal.sent_at.isoformat() if signal.sent_at else None,
    }


async def verify_key(client: Client, key: str) -> str:
    """The slug of the running monitor whose key this is. No worker needed."""
    parts = split_ping_key(key)
    if parts is None:
        raise UnknownKey
    slug = parts[0]
    handle = client.get_workflow_handle(monitor_workflow_id(slug))
    try:
        description = await handle.describe(rpc_timeout=TEMPORAL_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise UnknownKey from None
        raise TemporalUnavailable(f"Temporal did not answer: {exc.message}") from None
    if description.status is not WorkflowExecutionStatus.RUNNING:
        raise UnknownKey  # deleted
    try:
        digest = (await description.memo()).get(MEMO_PING_KEY_DIGEST)
        if digest is not None and not isinstance(digest, str):
            # The client's converter hands back what it cannot decode as it was.
            raise TypeError(f"the key digest is not text but {type(digest).__name__}")
    except Exception as exc:  # any client may start a workflow under a monitor's id
        log.warning(
            "monitor_http.ping.unreadable_memo",
            extra={"slug": slug, "why": f"{type(exc).__name__}: {exc}"},
        )
        raise UnknownKey from None
    if digest is None or not hmac.compare_digest(digest, ping_key_digest(key)):
        raise UnknownKey
    return slug


def checkin_fields(
    status: CheckInStatus, exit_codes: Sequence[str], content_type: str, body: bytes
) -> dict[str, Any]:
    """The check-in fields a ping's ``exit_code`` query values and body give.

    A body is the job's output (text), or with ``application/json`` an object with
    ``output``, ``exit_code`` and ``duration_seconds``. A non-zero exit code makes an ok an error.
    """
    fields: dict[str, Any] = {}
    if len(exit_codes) > 1:
        raise BadPing("exit_code given more than once")
    if exit_codes:
        try:
            fields["exit_code"] = int(exit_codes[0])
        except ValueError:
            raise BadPing(f"exit_code must be an integer, not {exit_codes[0]!r}") from None
    if content_type.split(";")[0].strip().lower() == "application/json" and body:
        fields.update(_json_fields(body, fields.get("exit_code")))
    elif body:
        # Job output as it came: bytes that are not UTF-8 are replaced rather than losing the
        # check-in; what is kept is cut to 10 KiB here already, to keep the signal small.
        fields["output"] = body.decode("utf-8", errors="replace")
    if isinstance(fields.get("output"), str):
        fields["output"] = truncate_output(fields["output"], MAX_OUTPUT_BYTES)[0] or None
    exit_code = fields.get("exit_code")
    if status is CheckInStatus.IN_PROGRESS and exit_code is not None:
        raise BadPing("exit_code belongs on /ping/{key} or /ping/{key}/fail, not /start")
    if status is CheckInStatus.OK and isinstance(exit_code, int) and exit_code != 0:
        status = CheckInStatus.ERROR
    fields["status"] = status
    return fields


def _json_fields(body: bytes, query_exit_code: int | None) -> dict[str, Any]:
    try:
        fields = json.loads(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit number
        raise BadPing(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadPing("body is JSON nested too deeply") from None
    if not isinstance(fields, dict):
        raise BadPing("a JSON body must be an object")
    unknown = sorted(set(fields) - BODY_FIELDS)
    if unknown:
        raise BadPing(f"unknown field(s) in body: {', '.join(unknown)}")
    if (
        "exit_code" in fields
        and query_exit_code is not None
        and fields["exit_code"] != query_exit_code
    ):
        raise BadPing("exit_code differs between the query and the body")
    return fields
