"""``python -m bench.cpu``, whose figures the README's CPU table quotes, runs end to end and
prints sane counts (nothing timed is asserted: the figures are read as ratios)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_bench_prints_every_side_a_ratio_for_each_round_and_what_views_cost(
    tmp_path: Path,
) -> None:
    out = tmp_path / "cpu.json"
    args = ["--steps", "2", "--reps", "2", "--watchers", "3", "--quiet-seconds", "2"]
    args += ["--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.cpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for line in (
        "floor (own process",
        "ratio, treadle whole replies",
        "round by round",
        "3 watchers on one run",
        "attributed to the views",
    ):
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
    # The views' calls are counted and each kind's cost measured: a view reads a run at least
    # once, a call the server answers costs it something, and the worker answers a poll of a
    # closed run by replaying it. Views of a parked run ask the server, not its worker.
    watched = figures["watched"]
    assert watched["polls_per_run"] >= 1
    for call in ("poll", "closed_poll", "describe"):
        assert watched[f"{call}_server_ms"] > 0, call
    assert watched["closed_poll_worker_ms"] > 0
    assert watched["attributed_server_ms"] > 0
    assert watched["quiet_describes_per_s"] > 0 and watched["quiet_polls_per_s"] == 0
