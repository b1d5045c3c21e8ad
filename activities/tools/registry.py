"""Where your own tools are registered: one line each (see ``activities/tools/custom.py``).

The catalogue offers them to the model beside the built-in tools, in this order.
"""

from __future__ import annotations

from typing import Any

from activities.tools import git_diff
from activities.tools.custom import Tool

CUSTOM_TOOLS: tuple[Tool[Any], ...] = (
    git_diff.TOOL,
)  # fmt: skip
