"""A short SAC run on Pendulum through daskrl.train on its embedded cluster: its replay shard and learner keep the
update-to-data ratio and tune the temperature, its checkpoint holds the critics, their targets and the temperature,
and enjoy plays it."""

from __future__ import annotations

import json
import math

import pytest

from ..helpers import run_config, slow


@slow("a short SAC run on Pendulum: replay shard, learner, checkpoint and enjoy (about 15 s on 2 cores)")
def test_sac_runs_on_replay_and_its_checkpoint_plays(tmp_path):
    from daskrl import train
    from daskrl.evaluation.episodes import enjoy
    from daskrl.learning.checkpoints import CheckpointStore

    config = run_config(tmp_path, "sac", env="Pendulum-v1", algo="sac", num_workers=1, num_envs_per_worker=4,
                        rollout=16, batch_size=32, hidden_sizes=[32, 32], learning_starts=256, replay_ratio=0.5,
                        init_alpha=0.5, train_for_env_steps=1_600, report_interval=1.0)
    summary = train(config)
    assert summary["env_steps"] >= 1_600
    state = CheckpointStore(tmp_path / "sac" / "checkpoints").load("latest")
    assert {"critics", "target_critics", "log_alpha", "critic_optimizer", "alpha_optimizer"} <= set(state)
    # the update-to-data ratio held, and the temperature was tuned away from where it started
    assert state["train_steps"] == pytest.approx(0.5 * (summary["env_steps"] - 256), rel=0.2), state["train_steps"]
    assert state["log_alpha"] != pytest.approx(math.log(0.5), abs=1e-3)
    saved = json.loads((tmp_path / "sac" / "config.json").read_text())
    assert saved["model"]["action_bounds"] == "squash" and saved["model"]["gaussian_std"] == "state"
    played = enjoy(str(tmp_path / "sac"), episodes=1, deterministic=True)
    assert math.isfinite(played["return_mean"])
