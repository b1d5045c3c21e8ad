"""Your own tools from your own modules, without forking Treadle.

A tool module is any importable module with a ``TOOLS`` sequence of ``Tool`` objects (see
``activities/tools/custom.py``). The worker loads the ones it is pointed at::

    treadle worker --tools my_pkg.tools --tools other_pkg.tools

and those that installed packages declare in the ``treadle.tools`` entry-point group (the entry
point names a module, or its ``TOOLS`` directly)::

    [project.entry-points."treadle.tools"]
    my_tools = "my_pkg.tools"

Loaded tools join the catalogue beside the registry's (``registry.py``) and run in the same
``run_tool`` activity. Which ones a worker loaded is the worker's business, not the code's, so a
run asks once (``list_loaded_tools``, a local activity on the worker that checks its calls:
the answer is recorded in the run's history) and offers those: a replay sees the recorded
answer whatever the replaying worker loaded. Give a run's workflow workers and its tools-only
workers the same ``--tools``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from temporalio import activity

from treadle.activities.tools import registry
from treadle.activities.tools.custom import Tool
from treadle.workflows.agent.messages import catalogue
from treadle.workflows.agent.messages.models import LoadedTools, LoadedToolsRequest

ENTRY_POINT_GROUP = "treadle.tools"


class ToolModuleError(ValueError):
    """A tool module that cannot be loaded: not importable, no ``TOOLS``, or a bad tool."""


def load(
    modules: Sequence[str | ModuleType | Tool[Any]], *, with_entry_points: bool = True
) -> tuple[Tool[Any], ...]:
    """Import ``modules`` (and the ``treadle.tools`` entry points), and add their tools to the
    catalogue and to the tools this worker runs. A module is named (``my_pkg.tools``) or given;
    a ``Tool`` may be given as it is. Returns the tools loaded; loading the same ``Tool``
    object again (a second plugin of one process, an entry point met twice) adds nothing."""
    found: list[Tool[Any]] = []
    for given in modules:
        if isinstance(given, Tool):
            found.append(given)
        elif isinstance(given, ModuleType):
            found += _tools_of(f"tools module {given.__name__}", given)
        else:
            found += _tools_of(f"--tools {given}", _import(given))
    if with_entry_points:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            where = f"entry point {point.name} ({point.value})"
            try:
                value = point.load()
            except Exception as exc:  # an import error of any kind is the module's
                raise ToolModuleError(f"{where}: cannot be loaded: {exc}") from exc
            found += _tools_of(where, value)
    new = [tool for tool in dict.fromkeys(found) if registry.BY_NAME.get(tool.name) != tool]
    try:
        catalogue.register(new, loaded=True)
    except ValueError as exc:
        raise ToolModuleError(str(exc)) from None
    registry.BY_NAME.update({tool.name: tool for tool in new})
    return tuple(dict.fromkeys(found))


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or the module's own error while importing
        raise ToolModuleError(f"--tools {name}: cannot be imported: {exc}") from exc


def _tools_of(where: str, value: Any) -> list[Tool[Any]]:
    tools = getattr(value, "TOOLS", None) if isinstance(value, ModuleType) else value
    if tools is None:
        raise ToolModuleError(f"{where}: the module has no TOOLS (a sequence of Tool objects)")
    if not isinstance(tools, Iterable) or isinstance(tools, str | bytes):
        raise ToolModuleError(f"{where}: TOOLS must be a sequence of Tool objects")
    listed = list(tools)
    bad = [repr(tool)[:80] for tool in listed if not isinstance(tool, Tool)]
    if bad:
        raise ToolModuleError(f"{where}: not Tool objects in TOOLS: {', '.join(bad)}")
    return listed


@activity.defn(name="list_loaded_tools")
async def list_loaded_tools(request: LoadedToolsRequest) -> LoadedTools:
    """The tools this worker loaded from your own modules (asked once per run, recorded)."""
    return LoadedTools(names=catalogue.loaded_names())
