"""Import rules between the layers, checked over the source with ``ast`` (nothing is imported).

    workflows/   deterministic; reaches activities only inside
                 ``with workflow.unsafe.imports_passed_through():``; never treadle or the entries
    activities/  all I/O; imports activities and the data modules of workflows, never a module that
                 defines a workflow class (except the commented allow-list below)
    treadle/     what the entry points share; never imports worker or starter
    worker.py, starter.py   the only modules at the repository root

Every violation is reported as ``path:line: <import statement>`` with the rule it breaks. The
checker is itself tested on small synthetic sources, so a rule cannot pass by seeing nothing.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("workflows", "activities", "treadle")
ENTRY_POINTS = ("worker", "starter")
# Every top-level name that belongs to this repository. An import of one of these is a dependency
# between the project's parts; anything else is the standard library or a third-party package.
PROJECT = frozenset({*LAYERS, *ENTRY_POINTS, "tests", "bench"})
# What each layer may import among the project's top-level names (the entry points: anything).
MAY_IMPORT = {
    "workflows": frozenset({"workflows", "activities"}),  # activities: passed through only
    "activities": frozenset({"activities", "workflows"}),  # workflows: no workflow modules
    "treadle": frozenset({"treadle", "activities", "workflows"}),
}

PASS_THROUGH = "temporalio.workflow.unsafe.imports_passed_through"
WORKFLOW_DEFN = "temporalio.workflow.defn"

# Activities modules allowed to import a module that defines a workflow class, each with why.
# Keyed by (importing module, imported workflow module). Any other such import fails
# test_activities_import_no_module_that_defines_a_workflow, and an entry that no import needs any
# more fails test_workflow_module_allow_list_has_no_stale_entries: the list stays exactly the code.
ACTIVITIES_IMPORTING_WORKFLOW_MODULES: dict[tuple[str, str], str] = {
    ("activities.jobs", "workflows.jobs.ledger"): (
        "record_job_run/send_run update-with-start the job's ledger, and cleanup_job_history "
        "lists the ledgers by type name and prunes them, through the typed client API "
        "(JobLedgerWorkflow.run, .record, .prune, .__name__), which names the workflow and its "
        "handlers by the class object. The ledger "
        "module imports only temporalio, pydantic and workflows.jobs.models, so loading it in "
        "the activity does not pull the sandboxed workflow code or any cycle back into activities."
    ),
    ("activities.threads", "workflows.agent.workflow"): (
        "send_to_thread (and the CLI's send/chat, which share the module) sends a thread its "
        "message and polls it through the typed client API (AgentWorkflow.send, .state, "
        ".__name__), naming the update and query by the class object rather than by strings "
        "that could silently match nothing. The agent workflow imports activities only inside "
        "its pass-through block and none of them imports activities.threads, so loading it "
        "here makes no cycle; the worker has it loaded already."
    ),
}


@dataclass(frozen=True)
class Source:
    """One parsed module of the project."""

    path: str  # relative to the repository root, with forward slashes
    module: str  # dotted module name
    is_package: bool  # an __init__.py
    tree: ast.Module

    @property
    def layer(self) -> str:
        return self.module.partition(".")[0]


@dataclass(frozen=True)
class Import:
    """One project module loaded by one import statement (a statement may load several)."""

    path: str
    line: int
    statement: str
    importer: str
    module: str  # absolute name of the loaded module
    passed_through: bool  # lexically inside ``with workflow.unsafe.imports_passed_through():``


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str


def parse(text: str, path: str) -> Source:
    """Parse ``text`` as the module at ``path`` (relative to the repository root)."""
    parts = list(Path(path).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return Source(path, ".".join(parts), is_package, ast.parse(text, filename=path))


@functools.cache
def sources() -> tuple[Source, ...]:
    """Every module of the three layers, plus the two entry points."""
    files = [path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))]
    files += [ROOT / f"{name}.py" for name in ENTRY_POINTS]
    return tuple(
        parse(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix()) for path in files
    )


@functools.cache
def known_modules() -> frozenset[str]:
    return frozenset(source.module for source in sources())


def aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it is bound to by the module's imports."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.partition(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def qualified(expr: ast.expr, bound: dict[str, str]) -> str | None:
    """``workflow.unsafe.imports_passed_through`` -> ``temporalio.workflow.unsafe....``."""
    attributes: list[str] = []
    while isinstance(expr, ast.Attribute):
        attributes.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([bound.get(expr.id, expr.id), *reversed(attributes)])


def workflow_classes(source: Source) -> list[str]:
    """Names of the classes decorated with ``@workflow.defn`` (bare or called) in ``source``."""
    bound = aliases(source.tree)
    found = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if qualified(target, bound) == WORKFLOW_DEFN:
                    found.append(node.name)
    return found


@functools.cache
def workflow_modules() -> dict[str, list[str]]:
    """Workflows modules that define a workflow class -> those classes."""
    return {
        source.module: classes
        for source in sources()
        if source.layer == "workflows" and (classes := workflow_classes(source))
    }


class _Collector(ast.NodeVisitor):
    def __init__(self, source: Source, known: frozenset[str]) -> None:
        self.source = source
        self.known = known
        self.bound = aliases(source.tree)
        self.passed_through = 0
        self.found: list[Import] = []

    def visit_With(self, node: ast.With) -> None:
        opens = any(
            isinstance(item.context_expr, ast.Call)
            and qualified(item.context_expr.func, self.bound) == PASS_THROUGH
            for item in node.items
        )
        for item in node.items:
            self.visit(item)
        self.passed_through += opens
        for statement in node.body:
            self.visit(statement)
        self.passed_through -= opens

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # A function body runs when called, after the ``with`` has exited: its imports are not
        # passed through even when the ``def`` sits inside the block.
        saved, self.passed_through = self.passed_through, 0
        self.generic_visit(node)
        self.passed_through = saved

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        self._add(node, [alias.name for alias in node.names])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node)
        # ``from workflows import agent``: the imported name may be a submodule.
        submodules = [f"{base}.{alias.name}" for alias in node.names]
        self._add(node, [base, *(name for name in submodules if name in self.known)])

    def visit_Call(self, node: ast.Call) -> None:
        # importlib.import_module("x.y") / __import__("x.y") with a literal absolute name.
        name = qualified(node.func, self.bound)
        if (
            name in {"importlib.import_module", "__import__"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            self._add(node, [node.args[0].value])
        self.generic_visit(node)

    def _absolute(self, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        parts = self.source.module.split(".")
        if not self.source.is_package:
            parts.pop()
        up = node.level - 1
        if up >= len(parts):
            raise ValueError(
                f"{self.source.path}:{node.lineno}: {ast.unparse(node)} goes above the top level"
            )
        base = ".".join(parts[: len(parts) - up])
        return f"{base}.{node.module}" if node.module else base

    def _add(self, node: ast.stmt | ast.expr, modules: Iterable[str]) -> None:
        loaded: dict[str, None] = {}
        for module in modules:
            pieces = module.split(".")
            if pieces[0] not in PROJECT:
                continue
            # Importing a.b.c runs a/__init__ and a/b/__init__ too.
            for end in range(1, len(pieces) + 1):
                loaded[".".join(pieces[:end])] = None
        for module in loaded:
            self.found.append(
                Import(
                    path=self.source.path,
                    line=node.lineno,
                    statement=ast.unparse(node),
                    importer=self.source.module,
                    module=module,
                    passed_through=self.passed_through > 0,
                )
            )


def imports(source: Source, known: frozenset[str]) -> list[Import]:
    """Every project module ``source`` loads, at any depth (module level, functions, blocks)."""
    collector = _Collector(source, known)
    collector.visit(source.tree)
    return collector.found


def broken_rules(
    imp: Import,
    workflow_modules: dict[str, list[str]],
    allowed: dict[tuple[str, str], str],
) -> Iterator[Violation]:
    """The rules ``imp`` breaks, each named by an id the tests filter on."""
    layer, target = imp.importer.partition(".")[0], imp.module.partition(".")[0]
    where = f"{imp.path}:{imp.line}: {imp.statement}"
    if layer not in MAY_IMPORT:
        return
    if target not in MAY_IMPORT[layer]:
        yield Violation(f"{layer}-layer", f"{where}  <- {layer}/ must not import {target}")
        return
    if layer == "workflows" and target == "activities" and not imp.passed_through:
        yield Violation(
            "pass-through",
            f"{where}  <- workflows/ may import activities only inside "
            "`with workflow.unsafe.imports_passed_through():`",
        )
    if (
        layer == "activities"
        and imp.module in workflow_modules
        and (imp.importer, imp.module) not in allowed
    ):
        classes = ", ".join(workflow_modules[imp.module])
        yield Violation(
            "workflow-module",
            f"{where}  <- loads {imp.module}, which defines workflow class {classes}",
        )


def violations(
    found: Iterable[Import],
    workflow_modules: dict[str, list[str]],
    allowed: dict[tuple[str, str], str] = ACTIVITIES_IMPORTING_WORKFLOW_MODULES,
) -> list[Violation]:
    unique: dict[Violation, None] = {}
    for imp in found:
        for violation in broken_rules(imp, workflow_modules, allowed):
            unique[violation] = None
    return list(unique)


@functools.cache
def project_imports() -> tuple[Import, ...]:
    return tuple(imp for source in sources() for imp in imports(source, known_modules()))


def project_violations(rule: str) -> list[str]:
    return [v.message for v in violations(project_imports(), workflow_modules()) if v.rule == rule]


def check(text: str, path: str) -> list[Violation]:
    """Run the checker on one synthetic module, as if it were at ``path`` in the repository."""
    source = parse(text, path)
    modules = dict(workflow_modules())
    if classes := workflow_classes(source):
        modules[source.module] = classes
    return violations(imports(source, known_modules() | {source.module}), modules)


# --------------------------------------------------------------------------------------------
# The rules, over the repository
# --------------------------------------------------------------------------------------------


def test_the_scan_sees_every_layer() -> None:
    """The scan reads more than 20 modules, from each layer and both entry points."""
    scanned = sources()
    assert len(scanned) > 20, [source.path for source in scanned]
    assert {source.layer for source in scanned} == {*LAYERS, *ENTRY_POINTS}
    assert len(project_imports()) > 50
    assert "workflows.jobs.ledger" in workflow_modules()


def test_only_worker_and_starter_sit_at_the_root() -> None:
    """No .py file at the repository root besides worker.py and starter.py."""
    extra = sorted(p.name for p in ROOT.glob("*.py") if p.stem not in ENTRY_POINTS)
    assert not extra, f"move into a package: {extra}"


def test_every_package_directory_has_an_init() -> None:
    """Every directory with Python code under workflows/, activities/, treadle/ has __init__.py."""
    missing = []
    for layer in LAYERS:
        root = ROOT / layer
        for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            rel = directory.relative_to(ROOT)
            if any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
                continue
            if any(directory.rglob("*.py")) and not (directory / "__init__.py").is_file():
                missing.append(f"{rel.as_posix()}/__init__.py")
    assert not missing, "missing package files:\n" + "\n".join(missing)


def test_workflows_reach_activities_only_through_the_pass_through() -> None:
    """workflows/ imports activities only inside `workflow.unsafe.imports_passed_through()`."""
    assert not (found := project_violations("pass-through")), "\n".join(found)


def test_workflows_never_import_treadle_or_the_entry_points() -> None:
    """workflows/ imports nothing from treadle, worker, starter (passed through or not)."""
    assert not (found := project_violations("workflows-layer")), "\n".join(found)


def test_activities_import_only_activities_and_workflows() -> None:
    """activities/ imports no project code but activities and workflows (never treadle/entries)."""
    assert not (found := project_violations("activities-layer")), "\n".join(found)


def test_activities_import_no_module_that_defines_a_workflow() -> None:
    """activities/ imports no @workflow.defn module beyond the commented allow-list."""
    assert not (found := project_violations("workflow-module")), "\n".join(found)


def test_workflow_module_allow_list_has_no_stale_entries() -> None:
    """Each allow-list entry is a real import of a module that still defines a workflow."""
    used = {(imp.importer, imp.module) for imp in project_imports()}
    stale = [
        f"{importer} -> {module}"
        for importer, module in ACTIVITIES_IMPORTING_WORKFLOW_MODULES
        if (importer, module) not in used or module not in workflow_modules()
    ]
    assert not stale, f"remove from ACTIVITIES_IMPORTING_WORKFLOW_MODULES: {stale}"


def test_treadle_never_imports_the_entry_points() -> None:
    """treadle/ never imports worker or starter."""
    assert not (found := project_violations("treadle-layer")), "\n".join(found)


# --------------------------------------------------------------------------------------------
# The checker, on synthetic sources
# --------------------------------------------------------------------------------------------

PASSED_THROUGH_AND_NOT = """\
from temporalio import workflow

from activities.jobs import record_job_run

with workflow.unsafe.imports_passed_through():
    from activities.tools.builtin import ToolActivities
"""


def test_checker_flags_activities_outside_the_pass_through_only() -> None:
    """The checker flags a module-level activities import, not the same kind inside the block."""
    found = check(PASSED_THROUGH_AND_NOT, "workflows/fake.py")
    assert [v.rule for v in found] == ["pass-through"]
    assert found[0].message.startswith(
        "workflows/fake.py:3: from activities.jobs import record_job_run  <- "
    )


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        pytest.param(
            "workflows/agent/fake.py",
            "def f():\n    import activities.jobs\n",
            [("pass-through", "workflows/agent/fake.py:2: import activities.jobs")],
            id="function-level import",
        ),
        pytest.param(
            "workflows/fake.py",
            "import temporalio.workflow as wf\n"
            "with wf.unsafe.imports_passed_through():\n"
            "    from activities import jobs\n",
            [],
            id="aliased pass-through",
        ),
        pytest.param(
            "workflows/fake.py",
            "from temporalio import workflow\n"
            "with open('x'), workflow.unsafe.imports_passed_through():\n"
            "    import activities\n"
            "with open('x'):\n"
            "    import activities\n",
            [("pass-through", "workflows/fake.py:5: import activities")],
            id="only the pass-through context counts",
        ),
        pytest.param(
            "workflows/fake.py",
            "from temporalio import workflow\n"
            "with workflow.unsafe.imports_passed_through():\n"
            "    def later():\n"
            "        import activities.jobs\n",
            [("pass-through", "workflows/fake.py:4: import activities.jobs")],
            id="function defined in the block runs outside it",
        ),
        pytest.param(
            "workflows/fake.py",
            "from temporalio import workflow\n"
            "with workflow.unsafe.imports_passed_through():\n"
            "    from treadle import connection\n"
            "    import worker\n",
            [
                ("workflows-layer", "workflows/fake.py:3: from treadle import connection"),
                ("workflows-layer", "workflows/fake.py:4: import worker"),
            ],
            id="treadle and entry points even passed through",
        ),
        pytest.param(
            "activities/fake.py",
            "from workflows.jobs import ledger\n"
            "import workflows.monitors.workflow as mw\n"
            "from workflows import cron\n"
            "from workflows.agent.models import ToolRequest\n",
            [
                ("workflow-module", "activities/fake.py:1: from workflows.jobs import ledger"),
                (
                    "workflow-module",
                    "activities/fake.py:2: import workflows.monitors.workflow as mw",
                ),
            ],
            id="workflow module as submodule, import-as, data modules allowed",
        ),
        pytest.param(
            "activities/fake.py",
            "def f():\n    from treadle.connection import connect\n    import starter\n",
            [
                (
                    "activities-layer",
                    "activities/fake.py:2: from treadle.connection import connect",
                ),
                ("activities-layer", "activities/fake.py:3: import starter"),
            ],
            id="activities never import treadle or entry points",
        ),
        pytest.param(
            "treadle/cli/fake.py",
            "import importlib\n"
            "from worker import build_worker\n"
            "importlib.import_module('starter')\n",
            [
                ("treadle-layer", "treadle/cli/fake.py:2: from worker import build_worker"),
                ("treadle-layer", "treadle/cli/fake.py:3: importlib.import_module('starter')"),
            ],
            id="treadle never imports entry points, static or dynamic",
        ),
    ],
)
def test_checker_flags_exactly_the_broken_imports(
    path: str, text: str, expected: list[tuple[str, str]]
) -> None:
    """Each synthetic module yields exactly the expected (rule, path:line: statement) pairs."""
    found = [(v.rule, v.message.partition("  <- ")[0]) for v in check(text, path)]
    assert found == expected


def test_checker_resolves_relative_imports() -> None:
    """Relative imports resolve against the module's package, including from __init__.py."""
    nested = parse("from ..jobs import ledger\nfrom . import models\n", "workflows/agent/fake.py")
    package = parse("from .models import X\n", "workflows/jobs/__init__.py")
    loaded = {imp.module for imp in imports(nested, known_modules())}
    assert {"workflows.jobs.ledger", "workflows.agent.models"} <= loaded
    assert "workflows.jobs.models" in {imp.module for imp in imports(package, known_modules())}
    # From activities, a relative import cannot leave the package: it is still activities.
    relative = check("from .. import errors\n", "activities/tools/fake.py")
    assert relative == []
    with pytest.raises(ValueError, match=r"activities/fake\.py:1: .* goes above the top level"):
        imports(parse("from ... import worker\n", "activities/fake.py"), known_modules())


def test_checker_recognises_workflow_definitions() -> None:
    """A class under @workflow.defn, bare, called or imported as defn, marks a workflow module."""
    text = """\
from temporalio import workflow
from temporalio.workflow import defn

@workflow.defn
class A: ...

@workflow.defn(name="b")
class B: ...

@defn(sandboxed=False)
class C: ...

@workflow.run
class NotAWorkflow: ...
"""
    assert workflow_classes(parse(text, "workflows/fake.py")) == ["A", "B", "C"]
    assert workflow_classes(parse("class D: ...\n", "workflows/fake.py")) == []
    expected = {"workflows.agent.workflow", "workflows.jobs.ledger", "workflows.monitors.workflow"}
    assert expected <= set(workflow_modules())
    assert "workflows.jobs.models" not in workflow_modules()


# Workflow code reads no clock, randomness, environment or file except through ``workflow.*``.
# The sandbox checks that at run time only in modules it re-imports; the loop itself
# (``workflows.agent.engine``) and every data module are passed through, so this is their check.
NONDETERMINISTIC_MODULES = frozenset(
    {"time", "random", "uuid", "os", "secrets", "socket", "subprocess", "shutil", "tempfile"}
    | {"httpx", "pathlib", "sys", "io", "glob", "urllib", "http"}
)
CLOCK_CALLS = frozenset({"now", "utcnow", "today"})  # on datetime or date: workflow.now()
FILE_BUILTINS = frozenset({"open", "input"})


def nondeterminism(tree: ast.Module, path: str) -> list[str]:
    """``path:line: what`` for each import or call that would make workflow code
    nondeterministic."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in CLOCK_CALLS
                and isinstance(func.value, ast.Name)
                and func.value.id in {"datetime", "date"}
            ):
                found.append(f"{path}:{node.lineno}: {func.value.id}.{func.attr}()")
            elif isinstance(func, ast.Name) and func.id in FILE_BUILTINS:
                found.append(f"{path}:{node.lineno}: {func.id}()")
            continue
        else:
            continue
        found += [
            f"{path}:{node.lineno}: import {name}"
            for name in names
            if name.split(".")[0] in NONDETERMINISTIC_MODULES
        ]
    return found


def test_workflow_code_reads_no_clock_randomness_or_files() -> None:
    """No module under workflows/ imports a clock, randomness, the environment or I/O, or calls
    ``datetime.now()`` or ``open()``: workflow.now(), workflow.random() and activities do that."""
    found = [
        line
        for path in sorted((ROOT / "workflows").rglob("*.py"))
        for line in nondeterminism(ast.parse(path.read_text()), str(path.relative_to(ROOT)))
    ]
    assert found == []


def test_checker_flags_clock_randomness_and_files() -> None:
    text = """\
import time
from os import environ
from datetime import datetime, timedelta
import json

def f():
    datetime.now()
    open("x")
    workflow.now()
    timedelta(seconds=1)
"""
    assert nondeterminism(ast.parse(text), "workflows/fake.py") == [
        "workflows/fake.py:1: import time",
        "workflows/fake.py:2: import os",
        "workflows/fake.py:7: datetime.now()",
        "workflows/fake.py:8: open()",
    ]
