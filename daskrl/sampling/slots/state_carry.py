"""How a rollout worker carries a recurrent policy's states from step to step and from slot to slot.

With a recurrent policy the envs' states live in the slot being filled (``rnn_live``, see
:mod:`daskrl.sampling.slots.trajectories`): whoever acts reads and writes them there, and the rollout worker, which steps
the envs, zeroes the state of an env whose episode ended, copies the states into the next slot it fills and records
them there as that slot's start (``rnn_states``). A feed-forward policy has no states: its carry does nothing. The
carry is chosen once, when the worker is configured, so the per-step code has one path for both.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from daskrl.sampling.policies.split_policies import Columns


class StateCarry(Protocol):
    """What the rollout worker and its acting strategy ask of the states (see the module docstring)."""

    def begin_slot(self, s: int, slot_index: int) -> None:
        """Split ``s`` starts filling ``slot_index``: its states start where the split's last slot left them."""

    def reset_ended(self, slot_index: int, t: int) -> None:
        """The envs whose episode ended at step ``t`` start the next one from zeros."""

    def end_slot(self, s: int, slot_index: int) -> None:
        """Split ``s`` filled ``slot_index``: keep its states for the split's next slot."""

    def states(self, slot_index: int, columns: Columns) -> np.ndarray | None:
        """The states to act from for these columns (a view, or a gathered copy to :meth:`put_back`)."""

    def put_back(self, slot_index: int, columns: Columns, states: np.ndarray | None) -> None:
        """Write the next states, after acting from :meth:`states`, where they belong."""


class NoStateCarry:
    """A feed-forward policy: there are no states to carry."""

    def begin_slot(self, s: int, slot_index: int) -> None:
        pass

    def reset_ended(self, slot_index: int, t: int) -> None:
        pass

    def end_slot(self, s: int, slot_index: int) -> None:
        pass

    def states(self, slot_index: int, columns: Columns) -> None:
        return None

    def put_back(self, slot_index: int, columns: Columns, states: np.ndarray | None) -> None:
        pass


class RecurrentStateCarry:
    """A recurrent policy's states, in the slots (see the module docstring)."""

    def __init__(self, live: np.ndarray, starts: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 num_splits: int) -> None:
        """``live``, ``starts``: the slots' ``rnn_live`` and ``rnn_states``; ``terminated``, ``truncated``: the slots'
        episode ends, which say whose state to zero."""
        self.live, self.starts = live, starts
        self.terminated, self.truncated = terminated, truncated
        self.next_start = [np.zeros(live.shape[1:], np.float32) for _ in range(num_splits)]  # each split's next slot

    def begin_slot(self, s: int, slot_index: int) -> None:
        self.live[slot_index] = self.next_start[s]
        self.starts[slot_index] = self.next_start[s]

    def reset_ended(self, slot_index: int, t: int) -> None:
        ended = (self.terminated[slot_index, t] | self.truncated[slot_index, t]).astype(bool)
        if ended.any():
            self.live[slot_index, ended] = 0.0

    def end_slot(self, s: int, slot_index: int) -> None:
        self.next_start[s][...] = self.live[slot_index]

    def states(self, slot_index: int, columns: Columns) -> np.ndarray:
        return self.live[slot_index][columns]

    def put_back(self, slot_index: int, columns: Columns, states: np.ndarray | None) -> None:
        if isinstance(columns, np.ndarray):  # a gathered copy; a slice's view was written in place
            self.live[slot_index][columns] = states


def state_carry_for(arrays: dict[str, np.ndarray], num_splits: int) -> StateCarry:
    """The carry for a worker's slot arrays: recurrent when they hold states (the layout has them for ``--rnn``)."""
    if "rnn_live" not in arrays:
        return NoStateCarry()
    return RecurrentStateCarry(arrays["rnn_live"], arrays["rnn_states"], arrays["terminated"], arrays["truncated"],
                               num_splits)
