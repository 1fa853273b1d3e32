"""Discrete, MultiDiscrete and Tuple observations (gymnasium's toy-text envs) come to daskrl as Dict observations:
the keys they get, indices shifted to start at 0, and FrozenLake trained, evaluated, exported and served by name as
a user of Stable-Baselines3 would expect (that run fails before the wrapper: the env's observations are refused)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.envs import make_env, probe_env
from daskrl.envs.layouts.index_obs import OBS_KEY, IndexObservations
from daskrl.errors import RequestError
from daskrl.evaluation import enjoy, load_policy
from daskrl.evaluation.export import export_policy
from daskrl.serving.policy import ServedPolicy

from .helpers import run_config, slow


class _Shifted(gym.Env):
    """Observations Tuple(Discrete(3, start=-1), MultiDiscrete([2, 4], start=[1, 0]), Box(2)), each step the next of
    a fixed sequence, so what the wrapper gives is known."""

    observation_space = gym.spaces.Tuple((gym.spaces.Discrete(3, start=-1),
                                          gym.spaces.MultiDiscrete([2, 4], start=[1, 0]),
                                          gym.spaces.Box(-1, 1, (2,), np.float32)))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (-1, np.array([2, 3]), np.array([0.5, -0.5], np.float32)), {}

    def step(self, action):
        return (1, np.array([1, 0]), np.zeros(2, np.float32)), 0.0, False, False, {}


def test_a_tuple_becomes_a_dict_keyed_by_position_with_indices_from_zero():
    env = IndexObservations(_Shifted())
    assert set(env.observation_space.spaces) == {"0", "1", "2"}
    assert env.observation_space["0"] == gym.spaces.Discrete(3)
    assert env.observation_space["1"] == gym.spaces.MultiDiscrete([2, 4])
    first, _ = env.reset()
    assert first["0"] == 0 and list(first["1"]) == [1, 3]
    np.testing.assert_array_equal(first["2"], [0.5, -0.5])
    after = env.step(0)[0]
    assert after["0"] == 2 and list(after["1"]) == [0, 0]
    assert env.observation_space.contains(first) and env.observation_space.contains(after)


def test_toy_text_envs_probe_as_one_hot_keys():
    lake = probe_env("FrozenLake-v1")
    assert [(k.name, k.kind, k.nvec) for k in lake.obs_keys] == [(OBS_KEY, "discrete", (16,))]
    assert lake.num_actions == 4
    blackjack = probe_env("Blackjack-v1")
    assert [(k.name, k.nvec) for k in blackjack.obs_keys] == [("0", (32,)), ("1", (11,)), ("2", (2,))]
    env = make_env("FrozenLake-v1", seed=3)
    try:
        obs, _ = env.reset()
        assert obs == {OBS_KEY: 0}  # the top-left start square
    finally:
        env.close()


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
