"""Discrete, MultiDiscrete and Tuple observations (gymnasium's toy-text envs) come to daskrl as Dict observations
(daskrl/envs/layouts/index_obs.py): the keys they get and their indices shifted to start at 0, on a wrapped env and
on FrozenLake and Blackjack as probed."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from daskrl.envs import make_env, probe_env
from daskrl.envs.layouts.index_obs import OBS_KEY, IndexObservations


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
