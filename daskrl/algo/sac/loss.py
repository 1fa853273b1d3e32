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


class SoftUpdate:
    """``target <- (1 - tau) target + tau online``, parameters and float buffers alike (tau 1: a hard copy), for
    one pair of modules: their tensors are listed once, then moved with one fused (foreach) call per update.
    Loading a state into either module copies into the same tensors, so the lists stay right."""

    def __init__(self, target: nn.Module, online: nn.Module) -> None:
        pairs = list(zip(target.state_dict().values(), online.state_dict().values(), strict=True))
        self.floats = ([t for t, _ in pairs if t.dtype.is_floating_point],
                       [o for t, o in pairs if t.dtype.is_floating_point])
        self.others = [(t, o) for t, o in pairs if not t.dtype.is_floating_point]

    @torch.no_grad()
    def __call__(self, tau: float) -> None:
        if self.floats[0]:
            torch._foreach_lerp_(self.floats[0], self.floats[1], tau)
        for t, o in self.others:
            t.copy_(o)


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau online`` once (a trainer keeps a :class:`SoftUpdate`)."""
    SoftUpdate(target, online)(tau)
