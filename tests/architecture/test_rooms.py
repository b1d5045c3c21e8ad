"""The suite's own layout, checked over the source with ``ast``: every test file lives in a room
(a folder per capability with its conftest.py), what rooms share lives in tests/support, no test
file imports another, and neither tests/ nor bench/ edits ``sys.path`` (bench runs as a package:
``python -m bench.suite``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.parsing import parse

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SHARED = {"support", "histories"}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_every_test_file_lives_in_a_room_with_its_conftest() -> None:
    assert not sorted(p.name for p in TESTS.glob("test_*.py")), "test files at the top of tests/"
    rooms = [p for p in TESTS.iterdir() if p.is_dir() and p.name not in SHARED | {"__pycache__"}]
    assert rooms
    for room in rooms:
        assert (room / "__init__.py").exists(), room.name
        assert (room / "conftest.py").exists(), room.name
        assert list(room.glob("test_*.py")), f"{room.name} holds no test file"
        assert not [p for p in room.iterdir() if p.is_dir() and p.name != "__pycache__"], room


def test_no_test_file_imports_another_and_support_imports_no_room() -> None:
    wrong = []
    for path in sorted(TESTS.rglob("*.py")):
        for name in _imported(path):
            parts = name.split(".")
            if parts[0] != "tests":
                continue
            test_module = parts[-1].startswith("test_") or parts[-1] == "conftest"
            support_reaching_out = path.parent.name == "support" and parts[1:2] != ["support"]
            if test_module or support_reaching_out:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_neither_tests_nor_bench_edits_sys_path() -> None:
    edits = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__).resolve() and "sys.path" in path.read_text()
    ]
    assert not edits
