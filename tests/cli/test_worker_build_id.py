"""The build id a worker reports: a hash of Treadle's code and the libraries that run it,
computed from the sources (the SDK's default hashes every loaded module at start-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

import treadle.cli.worker as worker


def test_the_build_id_follows_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same code gives the same id; one changed source file gives another."""
    for package in ("workflows", "activities", "treadle"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "a.py").write_text(f"X = {package!r}\n")
    (tmp_path / "worker.py").write_text("")
    monkeypatch.setattr(worker, "HERE", tmp_path)
    ids = []
    for text in ("X = 1\n", "X = 1\n", "X = 2\n"):
        (tmp_path / "treadle" / "a.py").write_text(text)
        worker.build_id.cache_clear()
        ids.append(worker.build_id())
    worker.build_id.cache_clear()
    assert ids[0] == ids[1] != ids[2]
    assert all(i.startswith("treadle-") for i in ids)
