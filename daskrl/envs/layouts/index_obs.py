"""Discrete, MultiDiscrete and Tuple observations (gymnasium's toy-text envs: FrozenLake, Taxi, CliffWalking,
Blackjack) given to daskrl as Dict observations, which it already stores and encodes: an index becomes a one-hot
input of the model (as Stable-Baselines3 and RLlib encode a Discrete observation), a Box part a float vector.

Why a wrapper where every env is built (:func:`daskrl.envs.registry.make_env`) rather than a kind of observation of
its own: every path that moves or reads observations (trajectory slots, the learner, evaluation, export, serving)
handles Dict observations, so the env is the one place that needs to know. The keys: ``obs`` for a lone Discrete or
MultiDiscrete observation, ``0``, ``1``, ... for the parts of a Tuple (a Tuple inside one is named ``0/1``, as a
Dict inside a Dict is). Indices are shifted to start at 0 where a space starts elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

#: the key of a lone Discrete or MultiDiscrete observation
OBS_KEY = "obs"


def needs_index_wrapper(space: gym.Space) -> bool:
    """Observations daskrl takes only through :class:`IndexObservations` (Box, MultiBinary and Dict it takes as they
    are)."""
    return isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Tuple))


Converter = Callable[[Any], Any]


def _zero_based(space: gym.Space) -> tuple[gym.Space, Converter]:
    """``space`` with its indices starting at 0 (Tuples become Dicts keyed by position, anything else stays), and the
    function from one of its observations to one of that space's: one walk of the space per env, so that a step only
    calls the function (3.8 -> 2.4 us for Blackjack's three indices, where the space was inspected per step)."""
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return gym.spaces.Discrete(int(space.n)), lambda value: int(value) - start
    if isinstance(space, gym.spaces.MultiDiscrete):
        offset = space.start
        return gym.spaces.MultiDiscrete(space.nvec), lambda value: np.asarray(value, dtype=np.int64) - offset
    if isinstance(space, gym.spaces.Tuple):
        parts = [(str(i), *_zero_based(part)) for i, part in enumerate(space.spaces)]
        return (gym.spaces.Dict({name: sub for name, sub, _ in parts}),
                lambda value: {name: convert(v) for (name, _, convert), v in zip(parts, value, strict=True)})
    if isinstance(space, gym.spaces.Dict):
        keyed = [(name, *_zero_based(part)) for name, part in space.spaces.items()]
        return (gym.spaces.Dict({name: sub for name, sub, _ in keyed}),
                lambda value: {name: convert(value[name]) for name, _, convert in keyed})
    return space, lambda value: value


class IndexObservations(gym.ObservationWrapper):
    """An env whose Discrete, MultiDiscrete or Tuple observations come as a Dict (see the module docstring)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space, convert = _zero_based(env.observation_space)
        if isinstance(space, gym.spaces.Dict):  # a Tuple's parts
            self.observation_space, self._convert = space, convert
        else:  # a lone Discrete or MultiDiscrete
            self.observation_space = gym.spaces.Dict({OBS_KEY: space})
            self._convert = lambda value: {OBS_KEY: convert(value)}

    def observation(self, observation: Any) -> dict[str, Any]:
        return self._convert(observation)


def with_index_observations(env: Any) -> Any:
    """``env`` wrapped in :class:`IndexObservations` where its observations need it, unchanged otherwise."""
    if isinstance(getattr(env, "observation_space", None), gym.Space) and needs_index_wrapper(env.observation_space):
        return IndexObservations(env)
    return env
