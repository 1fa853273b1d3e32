"""``benchmarks/gpu_check.py``, the script a session lent a CUDA machine runs first, is ready before one is lent: its
dry run measures the CPU half here, as a user runs the script, and prints one table and one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..helpers import slow

ROOT = Path(__file__).resolve().parents[2]


@slow("the GPU check's dry run: three learners, a Breakout sampling run and a Breakout training run")
def test_the_dry_run_measures_every_cpu_row_in_under_three_minutes():
    pytest.importorskip("ale_py", reason="the Breakout rows need the atari extra (pip install 'daskrl[atari]')")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry-run", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["dry_run"] and result["cuda_device"] == "none" and result["skipped"] == []
    rows = {row["row"]: row for row in result["rows"]}
    assert {"learner mlp", "learner cnn", "learner impala"} <= set(rows)
    assert [r for r in rows if r.startswith("Breakout sampling")] and [r for r in rows if r.startswith("Breakout training")]
    assert all(row["device"] == "cpu" and row["value"] > 0 for row in rows.values()), rows
    assert "| learner cnn | cpu |" in done.stdout  # the table a session pastes into docs/performance.md
    assert seconds < 180


def test_without_cuda_the_full_check_measures_the_cpu_and_says_why_not_cuda(monkeypatch):
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.devices(dry_run=False) == (["cpu"], "torch sees no CUDA device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_check.devices(dry_run=False) == (["cpu", "cuda"], "")
    assert gpu_check.devices(dry_run=True)[0] == ["cpu"]
    full = gpu_check.Plan.of(dry_run=False, training_s=90.0)
    assert full.rollout_workers == 8 and full.training_s == 90.0  # one inference worker serving 8 rollout workers
