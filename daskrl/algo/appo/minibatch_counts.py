"""What a minibatch's loss needs to know of the whole learner group's minibatch: its valid samples and the moments
its advantages are normalized with.

Every member of a learner group (:mod:`daskrl.learning.group.learner_group`) trains on its share of each minibatch, and
they must scale their gradients and normalize their advantages as one learner would on the whole minibatch. So the
counts and moments are sums over the group (the identity for one learner,
:class:`~daskrl.algo.common.collectives.SoloGroup`): for an epoch at once where the advantages are known before it
(targets from the whole batch), or minibatch by minibatch where each minibatch computes its own
(:mod:`daskrl.algo.appo.trajectory_minibatches`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from daskrl.algo.common.collectives import Collectives


class MinibatchCounts(NamedTuple):
    """What a minibatch's loss needs to know of the whole group's minibatch."""

    local: int  # this member's valid samples in it
    group: int  # the group's (the same for one learner)
    adv_moments: tuple[float, float] | None  # (mean, std) its advantages are normalized with; None: not normalized


def epoch_counts(flat: dict[str, torch.Tensor], order: torch.Tensor, minibatches: int, mb: int, group: Collectives,
                 moments: bool) -> list[MinibatchCounts]:
    """Every minibatch of an epoch: its valid samples, this member's and the whole group's, and the moments its
    advantages are normalized with, over the group's minibatch. One collective for the epoch (its order is known
    before its first minibatch) and one read back: no per-minibatch round trip, with one learner or K. ``moments``
    False: advantages not normalized, or not known before the epoch (targets per minibatch: each minibatch sums its
    own, :func:`normalized`)."""
    idx = order[:minibatches * mb].reshape(minibatches, mb)
    valid = flat["valid"][idx]
    local = valid.sum(1).double()
    if not moments:
        return [MinibatchCounts(int(own), int(n), None)
                for own, n in torch.stack([local, group.sum_(local.clone())], 1).tolist()]
    adv = flat["adv"][idx].double()
    masked = torch.where(valid, adv, torch.zeros_like(adv))
    summed = group.sum_(torch.stack([local, masked.sum(1), (masked * masked).sum(1)], 1))
    return [MinibatchCounts(int(own), int(n), advantage_moments(n, total, squares))
            for own, n, total, squares in torch.cat([local[:, None], summed], 1).tolist()]


def advantage_moments(n: float, total: float, squares: float) -> tuple[float, float] | None:
    """(mean, std) of ``n`` advantages from their sum and sum of squares (std as torch.std: n - 1); None when too few
    to normalize."""
    if n <= 1:
        return None
    mean = total / n
    return mean, math.sqrt(max(squares - n * mean * mean, 0.0) / (n - 1))


def normalized(adv: torch.Tensor, valid: torch.Tensor, group: Collectives, normalize: bool) -> torch.Tensor:
    """One minibatch's advantages normalized over its valid samples across the group (one small collective)."""
    if not normalize:
        return adv
    masked = torch.where(valid, adv, torch.zeros_like(adv)).double()
    n, total, squares = group.sum_(torch.stack([valid.sum().double(), masked.sum(), (masked * masked).sum()])).tolist()
    return normalized_with(adv, advantage_moments(n, total, squares))


def normalized_with(adv: torch.Tensor, moments: tuple[float, float] | None) -> torch.Tensor:
    """``adv`` less its mean, over its std (``moments``: :func:`advantage_moments`; None leaves it as it is)."""
    return adv if moments is None else (adv - moments[0]) / (moments[1] + 1e-8)
