"""IQL's two losses of its own (Kostrikov et al. 2021); its critics regress as SAC's do
(:func:`daskrl.algo.sac.loss.critic_loss`, on ``r + discount * V(s')``).

Why an expectile: V(s) is fitted to the target critics' ``min Q(s, a)`` over the dataset's actions only, never
querying Q at an action outside the data, and an upper expectile (tau > 0.5) of that distribution approaches the best
action's value in the data, so Q's backup through V is an in-sample maximum. Why advantage-weighted regression: the
actor is extracted by maximizing the log-likelihood of the dataset's actions weighted by ``exp(beta * (Q - V))``, so
it too only ever sees dataset actions; the weights are clipped (the official code's 100) so a few large advantages
cannot take the whole step.
"""

from __future__ import annotations

import torch


def expectile_loss(residuals: torch.Tensor, expectile: float, weights: torch.Tensor) -> torch.Tensor:
    """``L2_tau(u) = |tau - 1(u < 0)| u^2`` of ``residuals`` u [B] = min Q(s, a) - V(s), weighted per row:
    a positive residual (V below Q) costs ``tau``, a negative one ``1 - tau``."""
    side = torch.where(residuals < 0, 1.0 - expectile, expectile)
    return (weights * side * residuals.square()).mean()


def awr_weights(advantages: torch.Tensor, temperature: float, max_weight: float) -> torch.Tensor:
    """``min(exp(beta * advantages), max_weight)`` [B], detached: the regression weights of the dataset actions."""
    with torch.no_grad():
        return torch.exp(temperature * advantages).clamp(max=max_weight)


def awr_actor_loss(log_prob: torch.Tensor, regression_weights: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The actor's loss: the negative log-likelihood of the dataset actions ``log_prob`` [B], each weighted by its
    advantage weight and importance weight."""
    return -(weights * regression_weights * log_prob).mean()
