"""A ring of transitions in preallocated arrays: a replay shard's memory.

The arrays are given (:func:`store_shapes` says which): plain numpy in one process, or shared-memory arrays a
replay shard owns on its host, so that a learner on the same host reads a minibatch in place. When full, the oldest
transitions are overwritten; :meth:`TransitionStore.add` returns the positions it wrote so that a prioritized
sampler gives them their first priority.
"""

from __future__ import annotations

import numpy as np

from daskrl.replay.n_step import Transitions

FIELDS = ("obs", "actions", "rewards", "next_obs", "discounts")


def store_shapes(capacity: int, obs_shape: tuple, obs_dtype: str, action_shape: tuple, action_dtype: str
                 ) -> dict[str, tuple[tuple, str]]:
    """{field: (shape, dtype)} of a store of ``capacity`` transitions (images stay uint8: 4x less memory)."""
    obs_dtype = obs_dtype if np.dtype(obs_dtype) == np.uint8 else "float32"
    return {
        "obs": ((capacity, *obs_shape), obs_dtype),
        "actions": ((capacity, *action_shape), action_dtype),
        "rewards": ((capacity,), "float32"),
        "next_obs": ((capacity, *obs_shape), obs_dtype),
        "discounts": ((capacity,), "float32"),
    }


def numpy_arrays(shapes: dict[str, tuple[tuple, str]]) -> dict[str, np.ndarray]:
    return {name: np.zeros(shape, dtype) for name, (shape, dtype) in shapes.items()}


class TransitionStore:
    """``capacity`` transitions in ``arrays``, overwritten oldest first."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        missing = set(FIELDS) - set(arrays)
        if missing:
            raise ValueError(f"a transition store needs the arrays {sorted(missing)}")
        self.arrays = arrays
        self.capacity = int(arrays["rewards"].shape[0])
        self.next = 0  # where the next transition goes
        self.size = 0
        self.added = 0  # transitions added in all, overwritten ones included
        #: which transition each position holds (its number among all added): a priority computed for a position's
        #: earlier occupant is recognized as such (:meth:`current`)
        self.stamps = np.full(self.capacity, -1, np.int64)

    def add(self, transitions: Transitions) -> np.ndarray:
        """Write ``transitions`` (the newest last: if there are more than ``capacity``, only the newest are kept);
        returns the positions written."""
        n = len(transitions)
        fields = transitions.fields()
        skip = max(0, n - self.capacity)
        positions = (self.next + np.arange(n - skip)) % self.capacity
        for name in FIELDS:
            self.arrays[name][positions] = fields[name][skip:]
        self.stamps[positions] = self.added + skip + np.arange(n - skip)
        self.next = int((self.next + n - skip) % self.capacity)
        self.size = min(self.capacity, self.size + n - skip)
        self.added += n
        return positions

    def current(self, positions: np.ndarray, stamps: np.ndarray) -> np.ndarray:
        """[n] bool: whether each position still holds the transition ``stamps`` names (not overwritten since)."""
        return self.stamps[positions] == stamps

    def read(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the transitions at ``positions`` (a minibatch)."""
        self._check(positions)
        return {name: self.arrays[name][positions] for name in FIELDS}

    def read_into(self, positions: np.ndarray, out: dict[str, np.ndarray]) -> None:
        """Copy the transitions at ``positions`` straight into ``out`` (contiguous arrays of ``len(positions)``
        rows per field, such as a shard's batch block): one copy where :meth:`read` then a write take two."""
        self._check(positions)
        for name in FIELDS:
            np.take(self.arrays[name], positions, axis=0, out=out[name], mode="clip")  # checked: no buffering

    def _check(self, positions: np.ndarray) -> None:
        if positions.size and (positions.min() < 0 or positions.max() >= self.size):
            raise IndexError(f"replay positions out of range [0, {self.size})")
