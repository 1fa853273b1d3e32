"""APPO loss: PPO-clip surrogate + clipped value loss + entropy bonus (+ an optional KL penalty), averaged over valid
samples only.

Samples that are too stale (policy lag above ``max_policy_lag``) stay in the batch tensor, so shapes
remain static, but are excluded through ``valid_mask`` from every mean and thus from every gradient.

The KL penalty (``--kl-coef``) is estimated from what the samplers store, the log-prob of each taken action under the
behaviour policy, not from its whole distribution (which would cost the samplers storage per step): with
r = pi(a|s) / mu(a|s), the k3 estimator (r - 1) - log r of KL(mu || pi) is unbiased for actions drawn from mu and
never negative. It uses the ratio after the hard clamp, as the surrogate does, so one stale sample stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    import numpy as np


@dataclass
class LossOutput:
    """Total loss (with graph) plus detached float statistics for logging."""

    total: Tensor
    total_value: float  # total's value, read back with the others
    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float  # the k3 estimate of KL(behaviour || current), per valid sample
    clip_fraction: float
    ratio_mean: float


def _masked_mean(x: Tensor, mask: Tensor | None, count: Tensor | float) -> Tensor:
    """The mean of ``x`` over ``mask`` (None: every sample counts, and no masking op runs)."""
    if mask is None:
        return x.sum() / count
    # torch.where (not x * mask): an inf in a masked-out sample would otherwise turn the sum into NaN.
    return torch.where(mask, x, torch.zeros_like(x)).sum() / count


def _k3(ratio: Tensor) -> Tensor:
    """(r - 1) - log r per sample: the k3 estimate of KL(behaviour || current), always >= 0 (the module docstring)."""
    return (ratio - 1.0) - torch.log(ratio)


def _count(new_log_probs: Tensor, valid_mask: Tensor | None) -> tuple[Tensor | None, Tensor | float]:
    """(the mask as bool or None, the number of samples the means divide by: at least 1)."""
    if valid_mask is None:  # every sample counts: plain means, no masking ops (the common step: no stale sample)
        return None, float(max(new_log_probs.numel(), 1))
    valid_mask = valid_mask.to(torch.bool)
    return valid_mask, valid_mask.sum().clamp(min=1).to(new_log_probs.dtype)


def appo_loss(
    new_log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    values: Tensor,
    old_values: Tensor,
    value_targets: Tensor,
    entropy: Tensor,
    valid_mask: Tensor | None,
    *,
    clip_ratio: float,
    value_clip: float,
    entropy_coef: float,
    value_coef: float,
    ratio_clamp: tuple[float, float] = (0.05, 20.0),
    kl_coef: float = 0.0,
) -> LossOutput:
    """Compute the APPO loss over samples of any (matching) shape.

    The ratio is first hard-clamped to ``ratio_clamp`` so a very stale sample cannot produce an exploding
    update, then clipped *symmetrically in log space* to [1 / (1 + e), 1 + e] (as in Sample Factory) instead
    of PPO's [1 - e, 1 + e]. ``valid_mask=None`` means every sample is valid; a fully masked batch yields an
    exact zero loss (still attached to the graph) rather than 0 / 0 = NaN. ``kl_coef`` > 0 adds ``kl_coef`` times
    the mean k3 estimate of KL(behaviour || current) (see the module docstring) to the total.
    """
    mask, count = _count(new_log_probs, valid_mask)

    def mean(x: Tensor) -> Tensor:
        return _masked_mean(x, mask, count)

    # the clipped surrogate
    ratio = torch.exp(new_log_probs - old_log_probs).clamp(*ratio_clamp)
    clipped_ratio = ratio.clamp(1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio)
    policy_loss = -mean(torch.min(ratio * advantages, clipped_ratio * advantages))
    # the clipped value loss: the larger of the plain and the clipped squared error
    values_clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
    value_loss = 0.5 * mean(torch.max((values - value_targets) ** 2, (values_clipped - value_targets) ** 2))
    mean_entropy = mean(entropy)
    total = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    kl = mean(_k3(ratio)) if kl_coef > 0 else None  # with its graph: the penalty's
    if kl is not None:
        total = total + kl_coef * kl
    with torch.no_grad():  # every statistic read back at once (one read back, not one per value)
        approx_kl = kl.detach() if kl is not None else mean(_k3(ratio))
        clip_fraction = mean((ratio != clipped_ratio).to(ratio.dtype))
        stats = torch.stack([total.detach(), policy_loss.detach(), value_loss.detach(), mean_entropy.detach(),
                             approx_kl, clip_fraction, mean(ratio)]).tolist()
    return LossOutput(total, *stats)


def policy_lag_mask(
    sample_versions: Tensor | np.ndarray,
    current_version: int,
    max_policy_lag: int,
) -> Tensor:
    """True where a sample was produced at most ``max_policy_lag`` policy versions ago (still trainable)."""
    versions = torch.as_tensor(sample_versions)
    return (current_version - versions) <= max_policy_lag
