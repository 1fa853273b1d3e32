"""FrozenLake, whose observation is a Discrete square index, trained through daskrl.train on its embedded cluster, then
evaluated, exported and served by name as a user of Stable-Baselines3 would expect (before the Dict wrapper of
daskrl/envs/layouts/index_obs.py, the run failed: the env's observations were refused)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.envs.layouts.index_obs import OBS_KEY
from daskrl.errors import RequestError
from daskrl.evaluation import enjoy, load_policy
from daskrl.evaluation.export import export_policy
from daskrl.serving.policy import ServedPolicy

from ..helpers import run_config, slow


@slow("trains FrozenLake")
def test_frozen_lake_trains_evaluates_exports_and_serves(tmp_path):
    """The deterministic 4x4 lake: the only reward is reaching the goal (return 1) within 100 steps, which a
    random policy does about 1.5% of the time; the trained policy walks there from the one-hot square index. The
    exported graph and the served policy take the observation under its key, and choose what the model does."""
    summary = train(run_config(tmp_path, "lake", env="FrozenLake-v1", env_kwargs={"is_slippery": False},
                               entropy_coef=0.01, train_for_env_steps=120_000, train_for_seconds=120))
    assert summary["episode_return_mean"] >= 0.9, summary["episode_return_mean"]
    played = enjoy(summary["experiment_dir"], episodes=5, deterministic=True)
    assert played["return_mean"] == 1.0, played
    exported = export_policy(summary["experiment_dir"], "torchscript", output=str(tmp_path / "lake.pt"))
    assert [i["name"] for i in exported["inputs"]] == [OBS_KEY]
    graph = torch.jit.load(str(tmp_path / "lake.pt"))
    squares = torch.arange(16)
    graph_actions = graph(squares)[0].reshape(-1).tolist()
    config, model, _ = load_policy(summary["experiment_dir"])
    served = ServedPolicy(model, 1, config.env.env, deterministic=True)
    rows, single = served.observations([{OBS_KEY: int(i)} for i in squares])
    served_actions = served.act(rows, np.ones(16, bool), None).reshape(-1).tolist()
    assert not single and served_actions == graph_actions
    with pytest.raises(RequestError, match=OBS_KEY):
        served.observations(3)  # the bare index: the policy says what it takes
