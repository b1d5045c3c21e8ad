"""One door for content leaving an activity: the worker's secrets are redacted from every
result, failure and heartbeat (``interceptor``), from what goes to the store (``redacted_store``),
what activities log (``logs``), the live stream and span attributes (``redaction.current()``),
by one ``Redactor`` built at the worker's start from every secret it knows (``redaction``); and
content over one small threshold (a tool's output, a call's long argument values, a long reply
that calls tools) is stored and travels as a reference and a preview, read back by the
activities that need it whole (``door``)."""

from treadle.activities.content import door, logs
from treadle.activities.content.interceptor import RedactingInterceptor
from treadle.activities.content.redacted_store import RedactedBlobs
from treadle.activities.content.redaction import (
    REDACTED,
    Redactor,
    current,
    redact,
    redact_error,
    redacted,
    worker_secrets,
)

__all__ = [
    "REDACTED",
    "RedactedBlobs",
    "RedactingInterceptor",
    "Redactor",
    "current",
    "door",
    "logs",
    "redact",
    "redact_error",
    "redacted",
    "worker_secrets",
]
