"""The benchmark suite runs end to end and prints one table of sane counts (nothing timed is
asserted: the figures are for the README, read as ratios)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADER = ("row", "measure", "treadle", "baseline", "ratio", "target", "met")


def test_quick_suite_prints_one_table_of_sane_counts(tmp_path: Path) -> None:
    """`python -m bench.suite --quick --rows step,replay` prints the table and writes the same
    rows as JSON: the floor's step is 12 history events, Treadle's is at least that, every ratio
    is against a baseline measured in the run."""
    out = tmp_path / "suite.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.suite",
            "--quick",
            "--rows",
            "step,replay",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["row"])
    assert tuple(lines[header].split()) == HEADER
    table = [line.split()[0] for line in lines[header + 1 :]]
    assert table == ["step"] * 5 + ["replay"] * 4

    rows = json.loads(out.read_text())["rows"]
    assert [r["row"] for r in rows] == table
    events = [r["values"] for r in rows if r["measure"].startswith("history events")]
    assert events and all(v["floor_events"] == 12 for v in events)
    assert all(12 <= v["treadle_events"] <= 40 for v in events)
    once = next(r["values"] for r in rows if r["measure"].startswith("events a run pays once"))
    assert once["floor_events"] > 0 and once["treadle_events"] >= once["floor_events"]
    timed = [r["values"] for r in rows if r["measure"].startswith("ms per step")]
    assert all(v["treadle_ms"] > 0 and v["floor_ms"] > 0 for v in timed)
    replayed = next(r["values"] for r in rows if r["row"] == "replay")
    assert replayed["steps"] == 11  # ten writes and the answer, the floor's history as long
