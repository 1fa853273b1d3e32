"""DQN's loss on a replay minibatch: n-step double-Q targets, importance weights, TD errors for new priorities.

Pure torch, no model: the caller computes the online Q-values of the stored observations and both networks' Q-values
of the bootstrap observations. The target is ``R + discount * Q_target(s', a*)`` where ``R`` and ``discount``
(``gamma^m``, 0 after a terminal step) come from :func:`daskrl.replay.slot_transitions` and ``a*`` is the online
network's greedy action (double Q, van Hasselt et al. 2016) or the target network's own (plain DQN).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class DQNLoss:
    loss: torch.Tensor  # scalar, to minimize
    td_errors: torch.Tensor  # [B] detached: |these| are the new priorities
    q_mean: torch.Tensor  # 0-d, detached: the mean Q-value of the taken actions (a diverging critic shows here first)


def dqn_targets(rewards: torch.Tensor, discounts: torch.Tensor, next_q_target: torch.Tensor,
                next_q_online: torch.Tensor | None) -> torch.Tensor:
    """[B] bootstrapped targets; ``next_q_online`` None: plain DQN (the target network picks and rates)."""
    with torch.no_grad():
        picker = next_q_target if next_q_online is None else next_q_online
        best = picker.argmax(-1, keepdim=True)
        return rewards + discounts * next_q_target.gather(-1, best).squeeze(-1)


def dqn_loss(q: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
             huber_delta: float = 1.0) -> DQNLoss:
    """``q`` [B, A] online Q-values of the stored observations, ``actions`` [B] taken, ``targets`` [B] from
    :func:`dqn_targets`, ``weights`` [B] importance weights (ones for uniform replay). The loss is the weighted mean
    of the Huber loss of the TD errors (``huber_delta`` = inf: squared error / 2)."""
    taken = q.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
    td = targets - taken
    if huber_delta == float("inf"):
        per_sample = 0.5 * td.square()
    else:
        per_sample = F.huber_loss(taken, targets, reduction="none", delta=huber_delta)
    loss = (weights * per_sample).mean()
    return DQNLoss(loss, td.detach(), taken.detach().mean())


def dueling(values: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Q = V + A - mean(A) (Wang et al. 2016): ``values`` [B] or [B, 1], ``advantages`` [B, A]. The mean keeps V
    and A identifiable; the greedy action is A's argmax."""
    return values.reshape(-1, 1) + advantages - advantages.mean(-1, keepdim=True)
