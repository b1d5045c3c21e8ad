"""``python -m bench.cpu``, whose figures the README's CPU table quotes, runs end to end and
prints sane counts (nothing timed is asserted: the figures are read as ratios)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_bench_prints_every_side_and_a_ratio_for_each_round(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.cpu", "--steps", "2", "--reps", "2", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for line in ("floor (own process", "ratio, treadle whole replies", "round by round"):
        assert line in done.stdout, done.stdout
    figures = json.loads(out.read_text())
    for side in ("floor", "whole replies", "defaults"):
        assert figures[side]["worker_ms"] > 0 and figures[side]["server_ms"] > 0
    # 12 a step on both sides; a workflow task that timed out on a busy machine adds some.
    assert figures["events_per_step"]["floor"] >= 12.0
    assert figures["events_per_step"]["whole replies"] >= 12.0
    rounds = figures["worker_ratio_by_round"]
    assert set(rounds) == {"whole replies", "defaults"}
    assert all(len(r) == 2 and all(x > 0 for x in r) for r in rounds.values())
