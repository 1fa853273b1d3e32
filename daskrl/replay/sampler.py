"""Minibatch draws from a transition store: uniform, or prioritized with importance weights (Schaul et al. 2016).

A prioritized draw takes transition ``i`` with probability ``P(i) = p_i^alpha / sum_k p_k^alpha`` and weighs its loss
by ``w_i = (N P(i))^-beta / max_k w_k`` (``N`` transitions stored), which undoes the bias of the non-uniform draw as
``beta`` goes to 1. ``max_k w_k`` is the weight of the least likely transition in the store (the sum tree keeps the
minimum priority), so weights are comparable between minibatches. New transitions get the highest priority seen so
far, so each is drawn at least about once before its own TD error decides. Uniform draws have weight 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskrl.replay.sum_tree import SumTree


@dataclass
class Draw:
    """A minibatch's positions in the store and their importance weights."""

    positions: np.ndarray  # [batch] int64
    weights: np.ndarray  # [batch] float32


class UniformSampler:
    """Every stored transition equally likely; priorities are ignored."""

    prioritized = False

    def __init__(self, capacity: int, seed: int | None = None) -> None:
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)

    def added(self, positions: np.ndarray) -> None:
        """New transitions were written at ``positions`` (nothing to do: every position is as likely)."""

    def draw(self, size: int, batch: int, count: int = 1) -> Draw:
        """``count`` minibatches of ``batch`` positions among the first ``size``, one after another."""
        if size < 1:
            raise ValueError("cannot draw from an empty replay store")
        return Draw(self.rng.integers(0, size, batch * count, dtype=np.int64), np.ones(batch * count, np.float32))

    def update(self, positions: np.ndarray, td_errors: np.ndarray) -> None:
        """Priorities do not change uniform draws."""


class PrioritizedSampler:
    """Proportional prioritization: priority ``(|td error| + eps)^alpha``, drawn through a sum tree."""

    prioritized = True

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 seed: int | None = None) -> None:
        if alpha < 0 or not 0 <= beta <= 1:
            raise ValueError(f"prioritized replay needs alpha >= 0 and 0 <= beta <= 1, got {alpha}, {beta}")
        self.tree = SumTree(capacity)
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.max_priority = 1.0  # of p^alpha: what a new transition gets
        self.rng = np.random.default_rng(seed)

    def added(self, positions: np.ndarray) -> None:
        self.tree.update(positions, self.max_priority)

    def draw(self, size: int, batch: int, count: int = 1) -> Draw:
        """``count`` minibatches of ``batch`` positions among the first ``size``, one after another, each
        stratified (one draw per equal share of the total mass, which lowers the variance of a minibatch and keeps
        each draw's probability ``P(i)``); all from the priorities as they are now, in one pass down the tree."""
        total = self.tree.total
        if size < 1 or total <= 0:
            raise ValueError("cannot draw from an empty replay store")
        bounds = np.tile(np.arange(batch) * (total / batch), count)
        mass = np.minimum(bounds + self.rng.random(batch * count) * (total / batch), np.nextafter(total, 0))
        positions = self.tree.find(mass)
        return Draw(positions, self.weights(positions, size))

    def weights(self, positions: np.ndarray, size: int) -> np.ndarray:
        """Importance weights ``(N P(i))^-beta``, divided by the largest in the store (the minimum priority's)."""
        total = self.tree.total
        probability = self.tree.get(positions) / total
        largest = (size * self.tree.min / total) ** -self.beta
        return ((size * probability) ** -self.beta / largest).astype(np.float32)

    def update(self, positions: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities from the TD errors the learner just computed for ``positions``."""
        priority = (np.abs(np.asarray(td_errors, np.float64)) + self.eps) ** self.alpha
        self.tree.update(positions, priority)
        self.max_priority = max(self.max_priority, float(priority.max(initial=0.0)))
