"""Advantage estimators for time-major [T, B] rollouts.

Both estimators are pure functions run under ``torch.no_grad()``: their outputs are regression /
policy-gradient *targets*, so gradients must never flow through them into the value head.

Convention: ``dones[t]`` is true when the episode ended *at* step t, i.e. the transition
(x_t, a_t, r_t) was the last one of its episode, so nothing from t+1 onwards is bootstrapped into t.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _next_values(values: Tensor, next_values_or_bootstrap: Tensor) -> Tensor:
    """V(x_{t+1}) for every t: either given per step [T, B] or built from a [B] bootstrap value."""
    if next_values_or_bootstrap.shape == values.shape:
        return next_values_or_bootstrap.to(values.dtype)
    if next_values_or_bootstrap.shape != values.shape[1:]:
        raise ValueError(
            f"expected next values shaped {tuple(values.shape)} or bootstrap shaped "
            f"{tuple(values.shape[1:])}, got {tuple(next_values_or_bootstrap.shape)}"
        )
    return torch.cat([values[1:], next_values_or_bootstrap.to(values.dtype).unsqueeze(0)], dim=0)


@torch.no_grad()
def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    dones: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016).

    ``next_values`` is either V(x_{t+1}) for every step, shaped [T, B] (lets the caller pass the value of the
    real final observation of a time-limit-truncated episode), or a [B] bootstrap value V(x_T), in which case
    V(x_{t+1}) = values[t + 1] inside the rollout.

    Returns ``(advantages, returns)`` with ``returns = advantages + values`` (the value-head targets).
    """
    if rewards.shape != values.shape or dones.shape != values.shape:
        raise ValueError("rewards, values and dones must share the [T, B] shape")
    values_tp1 = _next_values(values, next_values)
    not_done = 1.0 - dones.to(values.dtype)
    deltas = rewards + gamma * not_done * values_tp1 - values

    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


@torch.no_grad()
def vtrace(
    behaviour_log_probs: Tensor,
    target_log_probs: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    dones: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace off-policy correction (Espeholt et al. 2018, IMPALA).

    Needed because in async APPO the actor's policy (mu, ``behaviour_log_probs``) lags the learner's
    (pi, ``target_log_probs``). With rho = pi / mu:

        rho_s = min(rho_bar, rho), c_s = min(c_bar, rho), discount_s = gamma * (1 - done_s)
        delta_s = rho_s * (r_s + discount_s * V(x_{s+1}) - V(x_s))
        v_s = V(x_s) + delta_s + discount_s * c_s * (v_{s+1} - V(x_{s+1}))      (backward recursion)
        pg_advantage_s = rho_s * (r_s + discount_s * v_{s+1} - V(x_s))

    with v_T = V(x_T) = ``bootstrap_value`` [B]. Returns ``(vs, pg_advantages)``, both [T, B].
    """
    shapes = {t.shape for t in (behaviour_log_probs, target_log_probs, rewards, values, dones)}
    if len(shapes) != 1:
        raise ValueError("log-probs, rewards, values and dones must share the [T, B] shape")
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(f"bootstrap_value must be shaped {tuple(values.shape[1:])}")

    dtype = values.dtype
    rhos = torch.exp(target_log_probs.to(dtype) - behaviour_log_probs.to(dtype))
    clipped_rhos = torch.clamp(rhos, max=rho_bar)
    cs = torch.clamp(rhos, max=c_bar)
    discounts = gamma * (1.0 - dones.to(dtype))

    bootstrap = bootstrap_value.to(dtype)
    values_tp1 = torch.cat([values[1:], bootstrap.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

    # acc_s = v_s - V(x_s); acc_T = 0 since v_T = V(x_T).
    vs_minus_v = torch.empty_like(values)
    acc = torch.zeros_like(bootstrap)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v

    vs_tp1 = torch.cat([vs[1:], bootstrap.unsqueeze(0)], dim=0)
    pg_advantages = clipped_rhos * (rewards + discounts * vs_tp1 - values)
    return vs, pg_advantages
