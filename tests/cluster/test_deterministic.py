"""--deterministic: two --sync runs with the same flags and seed write the same metrics.csv (time columns aside) and
the same final weights, in worker processes and with --serial; what depends on timing is refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from daskrl import train
from daskrl.config import Config, ConfigError
from daskrl.learning.checkpoints import CheckpointStore, training_digest

from ..helpers import run_config

#: columns that hold wall-clock time (everything else must match byte for byte)
TIME_COLUMNS = {"time_s", "fps"}
#: two rollout workers: a step takes all their slots, in whatever order they arrive
SYNC_CARTPOLE = {"env": "CartPole-v1", "sync": True, "deterministic": True, "seed": 3, "num_workers": 2,
                 "num_envs_per_worker": 8, "rollout": 32, "slots_per_split": 2, "batch_size": 256,
                 "train_for_env_steps": 12_000}


def rows_without_time(experiment_dir: Path) -> list[dict[str, str]]:
    with open(experiment_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIME_COLUMNS} for row in csv.DictReader(f)]


def weights_digest(experiment_dir: Path) -> tuple[int, str]:
    """(training steps, SHA-256 of every tensor of the final checkpoint: the model, optimizer moments, normalizers)."""
    state = CheckpointStore(experiment_dir / "checkpoints").load("latest")
    return state["train_steps"], training_digest(state)


#: a Dict-observation env (daskrl/testing/environments: CueEnv) with an LSTM policy
RECURRENT_DICT = {"env": "daskrl.testing.environments.envs:cue", "rnn": "lstm", "num_envs_per_worker": 16,
                  "rollout": 16, "batch_size": 256}


@pytest.mark.parametrize("options", [{}, {"serial": True}, RECURRENT_DICT],
                         ids=["worker processes", "serial", "lstm on dict observations"])
def test_two_deterministic_sync_runs_write_the_same_rows_and_weights(tmp_path, options):
    summaries = [train(run_config(tmp_path, f"run{i}", base=SYNC_CARTPOLE, **options)) for i in (1, 2)]
    first, second = (Path(s["experiment_dir"]) for s in summaries)
    rows = rows_without_time(first)
    steps, digest = weights_digest(first)
    assert steps >= 5 and len(rows) == steps  # a row per training step, the last one at the stop
    per_step = int(rows[0]["env_steps"])  # every slot of both rollout workers
    assert [int(r["env_steps"]) for r in rows] == [per_step * (i + 1) for i in range(steps)]
    assert rows == rows_without_time(second)
    assert (steps, digest) == weights_digest(second)
    assert summaries[0]["env_steps"] == summaries[1]["env_steps"] == per_step * steps


def test_what_depends_on_timing_is_refused_with_the_option_to_change():
    with pytest.raises(ConfigError) as err:
        Config.from_flat({"deterministic": True, "train_for_seconds": 60, "inference": "remote",
                          "eval_interval_env_steps": 10_000}).validate()
    text = str(err.value)
    assert "--deterministic needs --sync" in text and "no --train-for-seconds" in text
    assert "--deterministic needs --inference inline" in text and "no --eval-interval-env-steps" in text
    Config.from_flat({"deterministic": True, "sync": True}).validate()
