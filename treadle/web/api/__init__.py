"""Treadle's HTTP API: runs and threads started, read, decided, answered, forked and followed
over HTTP, and long-term memory edited, through ``AgentClient`` alone; its OpenAPI document
served at ``/v1/openapi.json``. docs/api.md is the manual.

app.py         the operations, bound to a client, and the app that serves them alone
operations.py  an operation declared once; the routes and the OpenAPI document made from it
bodies.py      what the operations take and answer (the document's schemas)
actions.py     what they do through the client; its errors as HTTP answers
streams.py     a run's stream as Server-Sent Events, raw or folded, resumable (Last-Event-ID)
transcript.py  a run's stream folded into a page's blocks, and the ops that change them
memory.py      long-term memory's operations: a namespace listed, recalled, added to, edited,
               forgotten
"""

from treadle.web.api.app import (
    DEFAULT_MODEL,
    MAX_BODY_BYTES,
    ApiSettings,
    api_app,
    api_operations,
    api_routes,
)

__all__ = [
    "DEFAULT_MODEL",
    "MAX_BODY_BYTES",
    "ApiSettings",
    "api_app",
    "api_operations",
    "api_routes",
]
