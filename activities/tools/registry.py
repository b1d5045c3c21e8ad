"""Where your own tools are registered: one line each (see ``activities/tools/custom.py``).

Importing this module adds them to the catalogue
(``treadle.workflows.agent.messages.catalogue.register``),
which offers them to the model beside the built-in tools, in this order. The worker imports it (with
the tool activity); the workflow layer never does. Tools from your own modules, loaded by the
worker (``treadle worker --tools``, ``treadle.tools`` entry points), join them in ``BY_NAME``
(``activities/tools/loading.py``).
"""

from __future__ import annotations

from typing import Any

from treadle.activities.memory import tools as memory_tools
from treadle.activities.tools import git_diff
from treadle.activities.tools.custom import Tool
from treadle.workflows.agent.messages import catalogue

CUSTOM_TOOLS: tuple[Tool[Any], ...] = (
    git_diff.TOOL,
    *memory_tools.TOOLS,  # offered only to runs with config.memory
)  # fmt: skip

catalogue.register(CUSTOM_TOOLS)

BY_NAME: dict[str, Tool[Any]] = {tool.name: tool for tool in CUSTOM_TOOLS}
"""Every one of your own tools this worker can run, by name: the tool activity looks here."""
