"""The TensorBoard writer benchmark (benchmarks/bench_tb_writer.py, the measurement behind docs/metrics.md's choice of
writer), tiny: it imports each writer in a fresh interpreter, reads every record of daskrl's own event files
(daskrl/monitor/outputs/tb_events.py) back, and skips a writer that is not installed."""

from __future__ import annotations

import pytest

pb = pytest.importorskip("tensorboard.compat.proto.event_pb2", reason="tensorboard reads the files back")


def test_the_writer_benchmark_reads_every_record_back_and_skips_a_writer_that_is_not_installed(capsys):
    """benchmarks/bench_tb_writer.py (the measurement behind docs/metrics.md's choice of writer), tiny."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import bench_tb_writer
    finally:
        sys.path.pop(0)
    missing = lambda name: None if name == "tensorboardX" else importlib.util.find_spec(name)
    result = bench_tb_writer.main(["--scalars", "300", "--repeats", "1", "--json"], available=missing)
    hand = result["writers"]["hand-made"]
    assert hand["records"] == hand["records_expected"] == 301 and hand["hparams_s"] >= 0  # its session start
    assert "not installed" in result["writers"]["tensorboardX"]["skipped"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
