"""How a sampler explores around its policy: chosen once per policy copy, so the default costs nothing per step.

APPO samples from its stochastic policy (no wrapper at all). DQN's samplers act epsilon-greedily on the Q-values
(the greedy action is the action head's argmax, which is the Q-values' under the dueling combination) with an
epsilon per rollout worker, as Ape-X gives each actor its own: worker ``i`` of ``N`` ends at
``eps^(1 + alpha i / (N - 1))``, so a few workers explore much and the rest hardly at all. Each worker's epsilon
falls linearly from 1 to its own over the first ``fraction`` of its share of the run's env steps (Ape-X keeps it
constant: ``--exploration-fraction 0``); a small run with one or two workers needs that early exploration.
TD3's samplers act uniformly at random for their share of ``--learning-starts``, then sample the policy (the
squashed mean plus its noise). A sampling-only run of a trained policy (``daskrl record``) takes its most likely or a
sampled action, replaced by a uniformly random one at a fixed rate.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from daskrl.setups import EpsilonGreedy, SamplingNoise, UniformWarmup

#: what a policy copy's act returns: actions, log-probs, values (None from the numpy path, which samplers build
#: without the critic: nothing reads a sampler's values)
Acted = tuple[np.ndarray, np.ndarray, np.ndarray | None]


class EpsilonGreedyActing:
    """Wraps a policy copy's act: the greedy action, replaced by a uniformly random one with probability epsilon.
    The log-probs written beside are the greedy policy's (an off-policy learner does not read them)."""

    def __init__(self, act: Callable[..., Acted], setup: EpsilonGreedy, seed: int) -> None:
        self.inner = act
        self.setup = setup
        self.rng = np.random.default_rng(seed)
        self.steps = setup.start_steps  # the run's progress when this worker was created: the decay goes on

    def __call__(self, obs: np.ndarray, state: np.ndarray | None = None) -> Acted:
        actions, log_probs, values = self.inner(obs, state, deterministic=True)
        eps = self.setup.epsilon(self.steps)
        self.steps += len(actions)
        explore = self.rng.random(len(actions)) < eps
        if explore.any():
            actions = np.array(actions, copy=True)
            actions[explore] = self.rng.integers(0, self.setup.num_actions, int(explore.sum()))
        return actions, log_probs, values


class UniformWarmupActing:
    """Wraps a policy copy's act: uniformly random actions in the Box until this worker took ``setup.steps`` env
    steps, the policy's own samples after. The log-probs written beside are the policy's (an off-policy learner does
    not read them)."""

    def __init__(self, act: Callable[..., Acted], setup: UniformWarmup, seed: int) -> None:
        self.inner = act
        self.setup = setup
        self.rng = np.random.default_rng(seed)
        self.low, self.high = np.asarray(setup.low, np.float32), np.asarray(setup.high, np.float32)
        self.steps = 0

    def __call__(self, obs: np.ndarray, state: np.ndarray | None = None) -> Acted:
        actions, log_probs, values = self.inner(obs, state)
        if self.steps < self.setup.steps:
            actions = self.rng.uniform(self.low, self.high, size=np.shape(actions)).astype(np.float32)
        self.steps += len(actions)
        return actions, log_probs, values


class NoisyActing:
    """Wraps a trained policy's act in a sampling-only run: its most likely or a sampled action, each replaced by a
    uniformly random one (in the Discrete space or the Box) with probability ``epsilon``."""

    def __init__(self, act: Callable[..., Acted], setup: SamplingNoise, seed: int) -> None:
        self.inner = act
        self.setup = setup
        self.rng = np.random.default_rng(seed)
        self.low, self.high = np.asarray(setup.low, np.float32), np.asarray(setup.high, np.float32)

    def __call__(self, obs: np.ndarray, state: np.ndarray | None = None) -> Acted:
        actions, log_probs, values = self.inner(obs, state, deterministic=self.setup.deterministic)
        if self.setup.epsilon > 0:
            noisy = self.rng.random(len(actions)) < self.setup.epsilon
            if noisy.any():
                actions = np.array(actions, copy=True)
                actions[noisy] = self._uniform(int(noisy.sum()), actions.shape[1:])
        return actions, log_probs, values

    def _uniform(self, count: int, shape: tuple[int, ...]) -> np.ndarray:
        if self.setup.num_actions:
            return self.rng.integers(0, self.setup.num_actions, count)
        return self.rng.uniform(self.low, self.high, size=(count, *shape)).astype(np.float32)


def exploring(act: Callable[..., Acted], setup: EpsilonGreedy | UniformWarmup | SamplingNoise | None,
              seed: int) -> Callable[..., Acted]:
    """``act`` itself when the policy explores by sampling (APPO, SAC), else wrapped."""
    if setup is None:
        return act
    if isinstance(setup, UniformWarmup):
        return UniformWarmupActing(act, setup, seed)
    if isinstance(setup, SamplingNoise):
        return NoisyActing(act, setup, seed)
    return EpsilonGreedyActing(act, setup, seed)
