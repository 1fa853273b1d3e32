"""A policy's part of the trajectory slots' rows, chosen once per policy.

Where a multi-agent env's agents have different spaces the slots hold the union layout
(:mod:`daskrl.sampling.policies.policy_spaces`): a policy of narrower spaces reads the first ``obs_len`` of each
observation row and writes the first ``act_dim`` of each Box action row, zeros after (``PolicySetup.cut``, from
:meth:`EnvSpaces.cut_for`). Every other policy takes the rows whole. The inline acting loop and the inference
worker use the same object, so neither asks at every step whether a policy is cut.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Rows(Protocol):
    def obs(self, obs: np.ndarray, columns: Any) -> np.ndarray:
        """The policy's part of one step's observation rows, for these columns of a split."""

    def write_actions(self, actions: np.ndarray, at: tuple, chosen: np.ndarray) -> None:
        """Write the policy's ``chosen`` actions into ``actions[at]`` (``at`` = (slot, t, columns))."""

    def narrow(self, obs: np.ndarray) -> np.ndarray:
        """The policy's part of a batch of observation rows ([batch, *obs_shape])."""

    def widen(self, chosen: np.ndarray, width: int) -> np.ndarray:
        """A batch of the policy's actions as rows of the slots' action ``width``."""


class WholeRows:
    """A policy of the slots' own spaces."""

    def obs(self, obs: np.ndarray, columns: Any) -> np.ndarray:
        return obs[columns]

    def write_actions(self, actions: np.ndarray, at: tuple, chosen: np.ndarray) -> None:
        actions[at] = chosen

    def narrow(self, obs: np.ndarray) -> np.ndarray:
        return obs

    def widen(self, chosen: np.ndarray, width: int) -> np.ndarray:
        return chosen


class CutRows:
    """A policy of narrower spaces than the slots' (see the module docstring)."""

    def __init__(self, obs_len: int, act_dim: int) -> None:
        """``act_dim`` 0: the actions are not narrower (discrete ones, or Box actions of the slots' width)."""
        self.obs_len, self.act_dim = obs_len, act_dim

    def obs(self, obs: np.ndarray, columns: Any) -> np.ndarray:
        return obs[columns, :self.obs_len]

    def write_actions(self, actions: np.ndarray, at: tuple, chosen: np.ndarray) -> None:
        if not self.act_dim:
            actions[at] = chosen
            return
        actions[(*at, slice(None, self.act_dim))] = chosen
        actions[(*at, slice(self.act_dim, None))] = 0

    def narrow(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, :self.obs_len]

    def widen(self, chosen: np.ndarray, width: int) -> np.ndarray:
        if not self.act_dim:
            return chosen
        return np.pad(chosen, ((0, 0), (0, width - self.act_dim)))


def rows_for(cut: tuple[int, int] | None) -> WholeRows | CutRows:
    """The rows of a policy with this ``PolicySetup.cut`` (None: the slots' own spaces)."""
    return WholeRows() if cut is None else CutRows(*cut)
