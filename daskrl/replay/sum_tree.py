"""A sum tree (and min tree) over a fixed number of priorities: prioritized replay's index.

Drawing ``i`` with probability ``p_i / sum(p)`` is a prefix-sum search: draw ``u`` uniform in ``[0, sum)`` and find the
leaf where the running sum passes ``u``. A complete binary tree whose inner nodes hold the sums of their children
does it in ``log2(capacity)`` steps, and so does an update. Both are vectorized over a whole minibatch (one numpy
operation per tree level), since a learner draws and updates hundreds of indices at a time. The tree also keeps the
minimum priority, which the importance weights' normalization needs.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of ``capacity`` leaves, with their sum and minimum kept up to date."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a sum tree needs a capacity of at least 1, got {capacity}")
        self.capacity = capacity
        self.leaves = 1 << max(0, int(capacity - 1).bit_length())  # the next power of two
        self.sums = np.zeros(2 * self.leaves, np.float64)  # node k's children: 2k and 2k + 1; the root is node 1
        self.mins = np.full(2 * self.leaves, np.inf, np.float64)

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """The smallest priority set so far among the leaves in use (inf while none is)."""
        return float(self.mins[1])

    def get(self, index: np.ndarray) -> np.ndarray:
        return self.sums[self.leaves + np.asarray(index, np.int64)]

    def update(self, index: np.ndarray, priority: np.ndarray) -> None:
        """Set the priorities of leaves ``index`` (a repeated index keeps its last priority)."""
        index = np.asarray(index, np.int64).ravel()
        priority = np.broadcast_to(np.asarray(priority, np.float64), index.shape)
        if np.any(priority < 0) or not np.all(np.isfinite(priority)):
            raise ValueError("priorities must be finite and non-negative")
        if index.size and (index.min() < 0 or index.max() >= self.capacity):
            raise IndexError(f"leaf index out of range [0, {self.capacity})")
        nodes = self.leaves + index
        self.sums[nodes] = priority
        self.mins[nodes] = priority
        nodes = np.unique(nodes // 2)  # every leaf is at the same depth: each pass climbs one level
        while nodes.size and nodes[0] >= 1:
            self.sums[nodes] = self.sums[2 * nodes] + self.sums[2 * nodes + 1]
            self.mins[nodes] = np.minimum(self.mins[2 * nodes], self.mins[2 * nodes + 1])
            nodes = np.unique(nodes // 2)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The leaf where the prefix sum of priorities passes each ``mass`` (each in ``[0, total)``)."""
        mass = np.array(mass, np.float64, copy=True).ravel()
        nodes = np.ones(mass.shape, np.int64)
        for _ in range(self.leaves.bit_length() - 1):  # the tree's depth
            left = 2 * nodes
            go_right = mass >= self.sums[left]
            mass = np.where(go_right, mass - self.sums[left], mass)
            nodes = np.where(go_right, left + 1, left)
        index = nodes - self.leaves
        # rounding may step past the last leaf in use (or onto a zero leaf): fall back on the last positive one left
        bad = (index >= self.capacity) | (self.sums[np.minimum(nodes, 2 * self.leaves - 1)] <= 0)
        if np.any(bad):
            positive = np.flatnonzero(self.sums[self.leaves:self.leaves + self.capacity] > 0)
            index[bad] = positive[np.searchsorted(positive, index[bad], side="right").clip(1) - 1]
        return index
