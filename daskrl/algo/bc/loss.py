"""Behavior cloning's two losses: the dataset's actions are the targets, there is no reward.

Box actions: the policy's mode regressed on the dataset action by squared error (d3rlpy's BC default, a
deterministic policy); its exploration std is left as it is, since evaluation takes the mode. Discrete actions: the
negative log-probability of the dataset action (cross-entropy), which is what a categorical head is fitted by.
Importance weights multiply each row's loss as the replay learners' losses do (1 for a dataset's rows).
"""

from __future__ import annotations

import torch


def mode_regression_loss(modes: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``modes``, ``actions`` [B, action_dim], ``weights`` [B] -> the weighted mean over rows of the mean squared
    error over action dimensions."""
    return (weights * (modes - actions).square().mean(-1)).mean()


def cross_entropy_loss(log_prob: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``log_prob`` [B]: of the dataset's actions under the policy -> their weighted mean negative log-probability."""
    return -(weights * log_prob).mean()
