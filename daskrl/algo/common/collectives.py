"""What a training step needs of the learners it trains with: sums over the group, and what the trainer builds on them.

The trainer calls these at every point where a statistic spans the batch (see :mod:`daskrl.algo.appo.trainer`). One
learner is a group of one: :class:`SoloGroup`'s collectives are the identity, so the trainer's code is the same for
1 and K learners. K learners are :class:`daskrl.learning.group.learner_group.LearnerGroup` (torch.distributed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np
import torch

from daskrl.algo.common.normalizers import RunningMeanStd


class Collectives(Protocol):
    """A learner's group as the trainer sees it."""

    rank: int
    world: int

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the members, in place; returns it."""

    def sum_gradients(self, parameters: Iterable[torch.nn.Parameter], finite: bool) -> bool:
        """Sum the members' gradients of ``parameters`` into each one's ``.grad``; False (and nothing to apply) when
        any member's loss was not ``finite``."""

    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        """Every member takes the leader's values of ``tensors`` (in place)."""

    def end(self) -> None:
        """The leader ends the group on purpose (the run stops): the members' collectives fail at once."""

    def ended(self) -> bool:
        """Whether the leader ended the group on purpose (asked after a collective failed)."""

    def close(self) -> None:
        """Leave the group."""


class SoloGroup:
    """One learner: every collective is the identity, so the trainer's code is the same for 1 and K learners."""

    rank = 0
    world = 1
    generation = 0

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def sum_gradients(self, parameters: Iterable[torch.nn.Parameter], finite: bool) -> bool:
        """The gradients are this learner's already: nothing to add, not even a copy."""
        return finite

    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        return None

    def end(self) -> None:
        return None

    def ended(self) -> bool:
        return False

    def close(self) -> None:
        return None


def sum_gradients_flat(group: Collectives, parameters: Iterable[torch.nn.Parameter], finite: bool) -> bool:
    """:meth:`Collectives.sum_gradients` for a real group: every gradient and the finite flag in one flat tensor,
    one collective. A parameter without a gradient counts as zeros."""
    params = list(parameters)
    device = params[0].device
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
                     + [torch.tensor([0.0 if finite else 1.0], device=device)])
    group.sum_(flat)
    if float(flat[-1]) != 0.0:
        return False
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n
    return True


def all_members(group: Collectives, flag: bool, device: torch.device) -> bool:
    """True when ``flag`` holds on every member (a step is skipped by all or by none)."""
    return float(group.sum_(torch.tensor([0.0 if flag else 1.0], device=device))) == 0.0


def update_over_group(stats: RunningMeanStd, samples: np.ndarray | torch.Tensor, group: Collectives,
                      device: torch.device) -> None:
    """Update running statistics with this step's ``samples`` [M, *stats.shape] of every member: the exact two-pass
    mean and (population) variance of the whole group's samples, each pass one collective of a few numbers (the
    samples stay where they are). For one learner this is what ``stats.update(samples)`` computes, to the bit."""
    values = torch.as_tensor(samples).detach().to("cpu", torch.float64).numpy().reshape(samples.shape[0], -1)
    firsts = group.sum_(torch.from_numpy(np.concatenate([[float(values.shape[0])], values.sum(axis=0)])).to(device))
    count = float(firsts[0])
    if count <= 0:
        return
    mean = (firsts[1:] / count).cpu().numpy()
    squares = group.sum_(torch.from_numpy(((values - mean) ** 2).sum(axis=0)).to(device))
    var = squares.cpu().numpy() / count
    stats.update_from_moments(mean.reshape(stats.shape), var.reshape(stats.shape), count)
