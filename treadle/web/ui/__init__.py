"""The browser page for people who work with agents (``treadle ui``).

app.py         the page's files beside the HTTP API (``treadle.web.api``), which is all the
               page's scripts use
static/        the HTML, script and style the page needs, shipped in the package (no build step)
"""

from treadle.web.ui.app import ui_app

__all__ = ["ui_app"]
