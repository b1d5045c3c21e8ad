"""Activity log lines, redacted: what an activity logs while it runs passes the same door.

An activity logs before its result or failure reaches the interceptor (an MCP server's reason
for being unavailable, a listing's traceback, a publish that failed): ``RedactingLogFilter``,
on the ``temporalio.activity`` logger that ``activity.logger`` writes to, redacts each record's
message, arguments, string extras and exception text with the running activity's ``Redactor``
(``redaction.current()``; outside an activity, key shapes only). A record without a secret is
left exactly as it was.
"""

from __future__ import annotations

import logging
import traceback

from treadle.activities.content.redaction import Redactor, current, redact_error

__all__ = ["ACTIVITY_LOGGER", "RedactingLogFilter", "install", "redact_every_line"]

ACTIVITY_LOGGER = "temporalio.activity"
"""The logger behind ``temporalio.activity.logger``: every activity's own lines."""

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}
"""A record's own attributes; the rest are a call's ``extra`` fields."""


class RedactingLogFilter(logging.Filter):
    """Redacts a record in place; never drops one. With a ``redactor`` it uses that one (the
    worker's, for lines logged outside any activity); else the running activity's."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = self._redactor or current()
        message = record.getMessage()
        clean = redact_error(message, redactor)
        if clean != message:
            record.msg, record.args = clean, None
        for name, value in list(vars(record).items()):
            if name not in _STANDARD and isinstance(value, str):
                setattr(record, name, redact_error(value, redactor))
        if record.exc_info and record.exc_info[1] is not None:
            text = "".join(traceback.format_exception(record.exc_info[1]))
            clean = redact_error(text, redactor)
            if clean != text:
                # Shown as text from here on: the exception object still holds the secret.
                record.exc_info, record.exc_text = None, clean.rstrip("\n")
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Put the filter on the activity logger, once per process (workers share the logger)."""
    target = logger or logging.getLogger(ACTIVITY_LOGGER)
    if not any(isinstance(f, RedactingLogFilter) for f in target.filters):
        target.addFilter(RedactingLogFilter())


def redact_every_line(redactor: Redactor) -> None:
    """Put a filter with the worker's ``redactor`` on every handler of the root logger: each line
    the worker process logs passes the door, not only what activities log (an MCP session's own
    lines, a library's). Call it after logging is configured."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingLogFilter) for f in handler.filters):
            handler.addFilter(RedactingLogFilter(redactor))
