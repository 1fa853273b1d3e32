"""n-step transitions from one full trajectory slot.

A slot holds ``T`` steps of ``B`` envs, time-major (daskrl/sampling/slots/trajectories.py), with ``obs[T]`` (the first
observation of the next slot) for bootstrapping. Each step ``t`` of env ``b`` becomes one transition

    (obs[t], action[t], R, next_obs, discount)     R = sum_{k < m} gamma^k r[t + k]

where ``m <= n`` stops at the episode's end or at the slot's end, ``next_obs`` is the observation after step
``t + m - 1`` and ``discount`` is ``gamma^m``, or 0 when the episode terminated. A learner's target is then
``R + discount * max_a Q(next_obs, a)`` for every transition alike. Stopping at the slot's end keeps a slot's
transitions independent of the next slot (which may come much later, or never); those few steps bootstrap a few
steps earlier, which is still an exact (shorter) n-step target. An episode a time limit cut bootstraps from its
real final observation (``final_obs``); one the slot had no room for ends as if terminated, as in APPO.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Transitions:
    """``N`` transitions, flat (``N = T * B``, step-major: transition ``t * B + b``)."""

    obs: np.ndarray  # [N, *obs_shape]
    actions: np.ndarray  # [N, *action_shape]
    rewards: np.ndarray  # [N] float32: the n-step discounted return R
    next_obs: np.ndarray  # [N, *obs_shape]: the observation to bootstrap from
    discounts: np.ndarray  # [N] float32: gamma^m, 0 where the episode terminated

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def fields(self) -> dict[str, np.ndarray]:
        return {"obs": self.obs, "actions": self.actions, "rewards": self.rewards, "next_obs": self.next_obs,
                "discounts": self.discounts}


def slot_transitions(part: dict[str, np.ndarray], n: int, gamma: float) -> Transitions:
    """The n-step transitions of one slot ``part`` (the arrays of :data:`~daskrl.learning.slot_reader.SLOT_FIELDS`
    for one slot: ``obs`` [T + 1, B, ...], ``actions``, ``rewards``, ``terminated``, ``truncated`` [T, B], and
    ``final_obs`` [K, ...] with ``final_at`` [K] at ``t * B + b``)."""
    if n < 1:
        raise ValueError(f"n-step returns need n >= 1, got {n}")
    rewards = np.asarray(part["rewards"], np.float64)
    T, B = rewards.shape
    terminated = np.asarray(part["terminated"]).astype(bool)
    finals = _final_rows(part, T, B)
    truncated = np.asarray(part["truncated"]).astype(bool)
    # a cut episode without a kept final observation cannot bootstrap: it ends as if terminated
    terminated = terminated | (truncated & (finals < 0))
    ended = terminated | truncated
    steps = np.arange(T)[:, None]
    total = np.zeros((T, B))
    last = np.broadcast_to(steps, (T, B)).copy()  # the last step each transition includes
    open_ = np.ones((T, B), bool)
    for k in range(n):
        inside = steps + k < T
        take = open_ & inside
        at = np.minimum(steps + k, T - 1)[:, 0]
        total += np.where(take, gamma ** k * rewards[at], 0.0)
        last = np.where(take, steps + k, last)
        open_ = take & ~ended[at]
    columns = np.broadcast_to(np.arange(B), (T, B))
    discounts = gamma ** (last - steps + 1) * ~terminated[last, columns]
    obs = np.asarray(part["obs"])
    next_obs = obs[last + 1, columns]
    cut = truncated[last, columns] & ~terminated[last, columns]
    if cut.any():
        next_obs[cut] = np.asarray(part["final_obs"])[finals[last, columns][cut]]
    return Transitions(
        obs=obs[:T].reshape(T * B, *obs.shape[2:]),
        actions=np.asarray(part["actions"]).reshape(T * B, *part["actions"].shape[2:]),
        rewards=total.reshape(-1).astype(np.float32),
        next_obs=next_obs.reshape(T * B, *obs.shape[2:]),
        discounts=discounts.reshape(-1).astype(np.float32),
    )


def _final_rows(part: dict[str, np.ndarray], T: int, B: int) -> np.ndarray:
    """[T, B] int: the row of ``final_obs`` holding step (t, b)'s real final observation, -1 where none."""
    rows = np.full((T, B), -1, np.int64)
    at = np.asarray(part.get("final_at", np.zeros(0)), np.int64)
    at = at[at >= 0]
    rows[at // B, at % B] = np.arange(at.size)
    return rows
