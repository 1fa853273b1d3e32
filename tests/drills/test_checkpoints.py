"""The kill drill (benchmarks/kill_drill.py, 30 kills in docs/faults.md), short, run as a process of its own: it
starts ``daskrl train`` runs and SIGKILLs their driver twice, once while a checkpoint is written, and each
``--resume`` must load the newest complete checkpoint."""

import pytest


@pytest.mark.slow(reason="3 runs of a few seconds, 2 of them SIGKILLed")
def test_the_kill_drill_resumes_from_the_newest_complete_checkpoint_every_time():
    """benchmarks/kill_drill.py (30 kills in docs/faults.md), short: 2 kills, the first while a checkpoint is
    written, and the resume after each."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    drill = Path(__file__).resolve().parents[2] / "benchmarks" / "kill_drill.py"
    out = subprocess.run([sys.executable, str(drill), "--kills", "2", "--json"], capture_output=True, text=True,
                         timeout=600)
    lines = out.stdout.strip().splitlines()
    assert lines, f"the drill printed nothing (exit {out.returncode}): {out.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert result["pass"] and result["kills"] == 2 and result["kills_during_write"] >= 1, out.stdout + out.stderr
    assert result["resumes_newest_complete"] == result["resumes"] == 2
