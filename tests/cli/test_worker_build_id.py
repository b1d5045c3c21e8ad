"""The build id a worker reports: a hash of Treadle's code and the libraries that run it,
computed from the sources (the SDK's default hashes every loaded module at start-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

import treadle.plugin.versions as worker


def test_the_build_id_follows_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same code gives the same id; one changed source file gives another, a file in a
    linked folder too (a checkout's treadle/workflows is a link to the root's workflows/)."""
    package = tmp_path / "treadle"
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "a.py").write_text("X = 1\n")
    package.mkdir()
    (package / "workflows").symlink_to(tmp_path / "workflows")
    monkeypatch.setattr(worker, "PACKAGE", package)
    ids = []
    for folder, text in (("", "X = 1\n"), ("", "X = 1\n"), ("", "X = 2\n"), ("workflows", "Y\n")):
        (package / folder / "a.py").write_text(text)
        worker.build_id.cache_clear()
        ids.append(worker.build_id())
    worker.build_id.cache_clear()
    assert ids[0] == ids[1] != ids[2] != ids[3]
    assert all(i.startswith("treadle-") for i in ids)
