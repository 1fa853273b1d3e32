"""SAC's three losses (Haarnoja et al. 2018, with automatic entropy tuning) and the target networks' soft update.

Pure torch, no model: the caller evaluates the twin critics and the squashed-Gaussian policy. With ``R`` and
``discount`` from the n-step transitions (:func:`daskrl.replay.slot_transitions`, ``gamma^m``, 0 after a terminal
step) the critics regress on ``R + discount * (min_i Q_target_i(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(.|s')``;
the policy minimizes ``alpha log pi(a|s) - min_i Q_i(s, a)``, ``a ~ pi(.|s)`` (reparameterized); ``log alpha``
moves so that the policy's entropy stays near the target (``-action_dim`` by default).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class CriticLoss:
    loss: torch.Tensor  # scalar: both critics' weighted squared errors, summed
    td_errors: torch.Tensor  # [B] detached: the mean of the two critics' errors (new priorities)
    targets: torch.Tensor  # [B] detached


def sac_targets(rewards: torch.Tensor, discounts: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor,
                next_log_prob: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """[B] soft targets from the target critics' values of ``(s', a')`` and ``log pi(a'|s')``."""
    with torch.no_grad():
        return rewards + discounts * (torch.minimum(next_q1, next_q2) - alpha * next_log_prob)


def critic_loss(q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> CriticLoss:
    """``q1``, ``q2`` [B]: both critics' values of the stored ``(s, a)``; ``weights`` [B] importance weights."""
    e1, e2 = targets - q1, targets - q2
    loss = 0.5 * (weights * (e1.square() + e2.square())).mean()
    return CriticLoss(loss, ((e1 + e2) / 2).detach(), targets.detach())


def actor_loss(q1_pi: torch.Tensor, q2_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor | float
               ) -> torch.Tensor:
    """The policy's loss on fresh reparameterized actions ``a ~ pi(.|s)`` (their critics' values and log-probs)."""
    return (alpha * log_prob - torch.minimum(q1_pi, q2_pi)).mean()


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """Moves ``log alpha`` up when the policy's entropy (``-log_prob``) falls below ``target_entropy``."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau online``, parameters and float buffers alike (tau 1: a hard copy)."""
    for t, o in zip(target.state_dict().values(), online.state_dict().values(), strict=True):
        if t.dtype.is_floating_point:
            t.lerp_(o, tau)
        else:
            t.copy_(o)
