"""The browser page for people who work with agents (``treadle ui``).

app.py         the Starlette app: pages, JSON API, each run's live stream as Server-Sent Events
guard.py       who may use it: access token, loopback host names, CSRF (double submit)
runs.py        the runs and threads list (Temporal visibility), starting one
actions.py     one run read (``state``, ``export``) and acted on (``decide``, ``answer_query``,
               ``send``, ``close``)
transcript.py  the run's stream folded into the page's blocks, and the ops that change them
static/        the HTML, script and style the page needs, shipped in the package (no build step)
"""

from treadle.web.ui.app import ui_app

__all__ = ["ui_app"]
