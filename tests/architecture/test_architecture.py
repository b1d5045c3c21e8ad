"""The shape of the code, beyond the import rules.

The import rules between the layers are import-linter contracts in ``pyproject.toml`` (run
``lint-imports``; ``.ci/run`` does, and so does ``test_the_import_contracts_hold``):

    worker.py, starter.py   a checkout's two thin scripts, the only modules at its root
    treadle      one import name; never imports worker or starter
    treadle.workflows   (the repository's workflows/) deterministic; imports nothing of
                 treadle but workflows and activities, and reaches activities only through each
                 feature's one activity-calls module (the agent's: ``agent.calls``)
    treadle.activities  (the repository's activities/) all I/O; imports nothing of treadle
                 but workflows' data modules, never a module that defines a workflow class
                 (beyond two typed clients, each with why)
    treadle.workflows.agent   no import cycle between its modules

What import-linter cannot see is checked here: that the activity-calls imports sit inside the
sandbox's pass-through block, that the contract's list of workflow modules is the code's, and
that workflow code reads no clock, randomness or file (the determinism scan).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.parsing import parse

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("workflows", "activities", "treadle")
ENTRY_POINTS = ("worker", "starter")
PASS_THROUGH = "imports_passed_through"


def python_files(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


def module_name(path: Path) -> str:
    """The module a file is: the repository's workflows/ and activities/ are the sources of
    ``treadle.workflows`` and ``treadle.activities``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in ("workflows", "activities"):
        parts.insert(0, "treadle")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return found


# --------------------------------------------------------------------------------------------
# The layout
# --------------------------------------------------------------------------------------------


def test_the_import_contracts_hold() -> None:
    """``lint-imports`` keeps every contract of pyproject.toml (layers, the one door from
    workflows to activities, no workflow module loaded by activities, no cycle in the agent)."""
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


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


# --------------------------------------------------------------------------------------------
# The sandbox: activities are imported inside the pass-through block
# --------------------------------------------------------------------------------------------


def outside_pass_through(tree: ast.Module, path: str) -> list[str]:
    """``path:line: import`` for each import of ``activities`` not lexically inside a
    ``with workflow.unsafe.imports_passed_through():`` block at module level (a function body
    runs later, outside the block)."""
    found: list[str] = []

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside = False
        if isinstance(node, ast.With):
            inside = inside or any(
                isinstance(item.context_expr, ast.Call)
                and isinstance(item.context_expr.func, ast.Attribute)
                and item.context_expr.func.attr == PASS_THROUGH
                for item in node.items
            )
        if isinstance(node, ast.Import | ast.ImportFrom) and not inside:
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            if any(name.split(".")[:2] == ["treadle", "activities"] for name in names):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return found


def test_workflows_import_activities_only_inside_the_pass_through() -> None:
    """Workflow code loads activity modules only in the sandbox's pass-through block, so they
    are imported once per worker, not re-imported (HTTP clients and all) for every run."""
    found = [
        line
        for path in python_files("workflows")
        for line in outside_pass_through(parse(path.read_text()), module_name(path))
    ]
    assert found == []


def test_the_pass_through_check_sees_what_it_must() -> None:
    """A module-level or function-level import of activities is flagged; one in the block,
    under any alias of ``workflow``, is not."""
    text = """\
from temporalio import workflow
import temporalio.workflow as wf
from treadle.activities.jobs import record_job_run

with workflow.unsafe.imports_passed_through():
    from treadle.activities.tools.builtin import ToolActivities
    def later():
        import treadle.activities.jobs
with wf.unsafe.imports_passed_through(), open("x"):
    import treadle.activities
with open("x"):
    import treadle.activities.model
"""
    assert outside_pass_through(parse(text), "fake") == [
        "fake:3: from treadle.activities.jobs import record_job_run",
        "fake:8: import treadle.activities.jobs",
        "fake:12: import treadle.activities.model",
    ]


# --------------------------------------------------------------------------------------------
# The contract's list of workflow modules is the code's
# --------------------------------------------------------------------------------------------


def workflow_classes(tree: ast.Module) -> list[str]:
    """Names of the classes decorated with ``@workflow.defn`` (bare or called)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (isinstance(target, ast.Attribute) and target.attr == "defn") or (
                    isinstance(target, ast.Name) and target.id == "defn"
                ):
                    found.append(node.name)
    return found


def test_activities_contract_forbids_every_workflow_module() -> None:
    """The contract that keeps workflow modules out of activities lists exactly the modules
    that define a workflow class, so a new workflow is covered the day it is written."""
    defined = {
        module_name(path)
        for path in python_files("workflows")
        if workflow_classes(parse(path.read_text()))
    }
    [contract] = [
        c
        for c in contracts()
        if c["type"] == "forbidden" and c["source_modules"] == ["treadle.activities"]
    ]
    assert set(contract["forbidden_modules"]) == defined  # type: ignore[arg-type]
    assert {"treadle.workflows.agent.workflow", "treadle.workflows.jobs.ledger"} <= defined


def test_workflow_classes_are_recognised() -> None:
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
    assert workflow_classes(parse(text)) == ["A", "B", "C"]


# --------------------------------------------------------------------------------------------
# Determinism: workflow code reads no clock, randomness, environment or file except through
# ``workflow.*``. The sandbox checks that at run time only in modules it re-imports; the loop
# itself (``treadle.workflows.agent.engine``) and every data module are passed through, so this is
# their check.
# --------------------------------------------------------------------------------------------

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
        for path in python_files("workflows")
        for line in nondeterminism(parse(path.read_text()), str(path.relative_to(ROOT)))
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
    assert nondeterminism(parse(text), "workflows/fake.py") == [
        "workflows/fake.py:1: import time",
        "workflows/fake.py:2: import os",
        "workflows/fake.py:7: datetime.now()",
        "workflows/fake.py:8: open()",
    ]


def test_every_workflow_module_is_passed_through_the_sandbox() -> None:
    """A workflow module left out would be imported again through the sandbox for every run a
    worker caches and every replay (and a class it defines would exist twice: once for the
    modules passed through, once for the sandbox's copy). The pass-through names packages, so a
    new module is covered the day it is written."""
    from treadle.sandbox import PASSTHROUGH_MODULES

    def passed(module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in PASSTHROUGH_MODULES)

    modules = [module_name(p) for p in python_files("workflows")]
    assert len(modules) > 40
    assert [m for m in modules if not passed(m)] == []
