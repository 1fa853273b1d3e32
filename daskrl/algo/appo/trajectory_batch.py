"""A training step's data: ``N`` env columns of ``T`` steps, time-major numpy arrays (the batcher joins slots into it).

Every batch carries every field: a batch built without the optional ones gets their neutral form once, here, so a
training step reads them all the same way: no time-limit finals (empty), a start state of width 0 (a feed-forward
policy has no state) and a valid mask that marks every step (the whole batch is this policy's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TrajectoryBatch:
    """Time-major training data from ``N`` env streams of ``T`` steps (numpy arrays)."""

    obs: np.ndarray  # [T + 1, N, *obs_shape]
    actions: np.ndarray  # [T, N, *action_shape]
    rewards: np.ndarray  # [T, N]
    dones: np.ndarray  # [T, N] episode ended after step t
    log_probs: np.ndarray  # [T, N] behaviour policy
    policy_version: np.ndarray  # [T, N]
    # episodes cut by a time limit: their real final observations [M, *obs_shape], and where each one's step is in
    # the flattened [T * N] batch (its `dones` entry is set; its `obs` at t + 1 is the next episode's first)
    final_obs: np.ndarray | None = None  # never None once built: [0, *obs_shape] when none was given
    final_index: np.ndarray | None = None  # [M] int
    # a recurrent policy's state entering step 0 of each column [N, S] (see daskrl/algo/appo/recurrent.py); [N, 0] for a
    # feed-forward policy
    rnn_states: np.ndarray | None = None
    # [T, N] bool: the steps this policy took (several policies share slots; an agent may sit steps out); all True
    # when not given
    valid: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Fill the optional fields with their neutral form (see the module docstring)."""
        columns = self.rewards.shape[1]
        if self.final_obs is None:
            self.final_obs = np.zeros((0, *self.obs.shape[2:]), self.obs.dtype)
        if self.final_index is None:
            self.final_index = np.zeros(0, np.int64)
        if self.rnn_states is None:
            self.rnn_states = np.zeros((columns, 0), np.float32)
        if self.valid is None:
            self.valid = np.ones(self.rewards.shape, bool)

    @property
    def num_samples(self) -> int:
        return int(self.rewards.size)

    def finite(self) -> bool:
        """No NaN or inf in what training reads (checked before any statistic takes it). Integer arrays (uint8
        frames) hold nothing else, and scanning an Atari step's 29 MB of them was 5% of a Breakout learner's time
        (py-spy)."""
        arrays = (self.obs, self.rewards, self.log_probs, self.final_obs, self.rnn_states)
        return all(np.isfinite(a).all() for a in arrays if np.issubdtype(a.dtype, np.inexact))
