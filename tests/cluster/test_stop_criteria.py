"""A stop criterion and the best checkpoint judge a policy by a full window of episodes (``--stop-window``, 100 by
default), checked in short CartPole runs through daskrl.train on its embedded cluster: --stop-at-return waits for a
full window, and no checkpoint is tagged best before the window is full. The first episodes to end are often the
short ones, and a mean of a handful of them says nothing about the policy."""

from __future__ import annotations

import csv
from pathlib import Path

from daskrl import train
from daskrl.learning.checkpoints import CheckpointStore

from ..helpers import SMALL_CARTPOLE, run_config, slow

pytestmark = slow("CartPole runs of a few seconds")


def test_stop_at_return_waits_for_a_full_window_of_episodes(tmp_path):
    """Every CartPole episode returns at least 8, so --stop-at-return 5 is met by any mean: the run stops at the
    first report whose window holds --stop-window episodes, never before (it used to stop on ten). Sampling only:
    the policy does not learn, so its episodes stay short and the window fills in seconds."""
    config = run_config(tmp_path, "window", base=SMALL_CARTPOLE, stop_at_return=5, stop_window=1500,
                        report_interval=0.25, train_for_env_steps=0, train_for_seconds=120, sampling_only=True)
    summary = train(config)
    assert summary["stop_reason"].startswith("mean return") and "over the last 1500 episodes" in \
        summary["stop_reason"], summary["stop_reason"]
    assert summary["episodes"] >= 1500 and summary["episodes_in_mean"] == 1500
    with open(Path(config.experiment_dir) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert any(int(r["episodes_in_mean"]) < 1500 for r in rows), rows  # reports came before the window filled
    assert all(int(r["episodes_in_mean"]) == min(int(r["episodes"]), 1500) for r in rows)


def test_no_best_checkpoint_before_the_window_is_full(tmp_path):
    """A run too short to finish --stop-window episodes keeps its latest checkpoints and tags none best."""
    config = run_config(tmp_path, "short", base=SMALL_CARTPOLE, stop_window=100_000, train_for_env_steps=20_000,
                        checkpoint_interval=0.5)
    summary = train(config)
    store = CheckpointStore(Path(config.experiment_dir) / "checkpoints")
    assert store.latest() is not None and store.best() is None, summary
    assert 0 < summary["episodes_in_mean"] == summary["episodes"] < 100_000
