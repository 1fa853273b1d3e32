"""What a training step needs of the learners it trains with: sums and broadcasts over the group.

The trainer calls these at every point where a statistic spans the batch (see :mod:`daskrl.algo.trainer`). One
learner is a group of one: :class:`SoloGroup`'s collectives are the identity, so the trainer's code is the same for
1 and K learners. K learners are :class:`daskrl.learning.learner_group.LearnerGroup` (torch.distributed).
"""

from __future__ import annotations

from typing import Protocol

import torch


class Collectives(Protocol):
    """A learner's group as the trainer sees it."""

    rank: int
    world: int

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the members, in place; returns it."""

    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        """Every member takes the leader's values of ``tensors`` (in place)."""

    def close(self) -> None:
        """Leave the group."""


class GroupBroken(RuntimeError):
    """A collective failed or timed out: a member is gone. The learner stops training with the group until the
    runner forms it again."""


class SoloGroup:
    """One learner: every collective is the identity, so the trainer's code is the same for 1 and K learners."""

    rank = 0
    world = 1
    generation = 0

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        return None

    def close(self) -> None:
        return None
