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
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor


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


class _Terms(NamedTuple):
    """The per-sample quantities both forms of the loss are made of (:func:`appo_loss` in torch,
    :func:`appo_loss_gradients` in numpy)."""

    raw_ratio: Any  # exp(new - old log-prob)
    ratio: Any  # raw_ratio hard-clamped to ratio_clamp
    clipped_ratio: Any  # ratio clipped to [1 / (1 + e), 1 + e]
    by_ratio: Any  # ratio * advantages
    by_clipped: Any  # clipped_ratio * advantages
    value_step: Any  # values - old_values
    clipped_values: Any  # old_values + value_step clamped to +-value_clip
    value_errors: Any  # (values - targets)^2
    clipped_value_errors: Any  # (old_values + clamp(value_step) - targets)^2


def _terms(new_log_probs: Any, old_log_probs: Any, advantages: Any, values: Any, old_values: Any, value_targets: Any,
           clip_ratio: float, value_clip: float, ratio_clamp: tuple[float, float], exp: Any = torch.exp) -> _Terms:
    """The terms from torch tensors, or from numpy arrays with ``exp=np.exp`` (the rest is the same code)."""
    raw_ratio = exp(new_log_probs - old_log_probs)
    ratio = raw_ratio.clip(ratio_clamp[0], ratio_clamp[1])
    clipped_ratio = ratio.clip(1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio)
    value_step = values - old_values
    values_clipped = old_values + value_step.clip(-value_clip, value_clip)
    return _Terms(raw_ratio, ratio, clipped_ratio, ratio * advantages, clipped_ratio * advantages, value_step,
                  values_clipped, (values - value_targets) ** 2, (values_clipped - value_targets) ** 2)


def _count(new_log_probs: Tensor, valid_mask: Tensor | None) -> tuple[Tensor | None, Tensor | float]:
    """(the mask as bool or None, the number of samples the means divide by: at least 1)."""
    if valid_mask is None:  # every sample counts: plain means, no masking ops (the common step: no stale sample)
        return None, float(max(new_log_probs.numel(), 1))
    valid_mask = valid_mask.to(torch.bool)
    return valid_mask, valid_mask.sum().clamp(min=1).to(new_log_probs.dtype)


def _losses(terms: _Terms, entropy: Tensor, valid_mask: Tensor | None, count: Tensor | float, entropy_coef: float,
            value_coef: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(total, policy loss, value loss, mean entropy), the KL penalty aside."""
    policy_loss = -_masked_mean(torch.min(terms.by_ratio, terms.by_clipped), valid_mask, count)
    value_loss = 0.5 * _masked_mean(torch.max(terms.value_errors, terms.clipped_value_errors), valid_mask, count)
    mean_entropy = _masked_mean(entropy, valid_mask, count)
    return policy_loss + value_coef * value_loss - entropy_coef * mean_entropy, policy_loss, value_loss, mean_entropy


def _output(total: Tensor, policy_loss: Tensor, value_loss: Tensor, mean_entropy: Tensor, approx_kl: Tensor,
            terms: _Terms, valid_mask: Tensor | None, count: Tensor | float) -> LossOutput:
    """The loss and its statistics, every statistic read back at once (one read back, not one per value)."""
    with torch.no_grad():
        clipped = (terms.ratio != terms.clipped_ratio).to(terms.ratio.dtype)
        stats = torch.stack([total.detach(), policy_loss.detach(), value_loss.detach(), mean_entropy.detach(),
                             approx_kl, _masked_mean(clipped, valid_mask, count),
                             _masked_mean(terms.ratio, valid_mask, count)]).tolist()
    return LossOutput(total, *stats)


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
    valid_mask, count = _count(new_log_probs, valid_mask)
    terms = _terms(new_log_probs, old_log_probs, advantages, values, old_values, value_targets, clip_ratio,
                   value_clip, ratio_clamp)
    total, policy_loss, value_loss, mean_entropy = _losses(terms, entropy, valid_mask, count, entropy_coef,
                                                           value_coef)
    kl = _masked_mean(_k3(terms.ratio), valid_mask, count) if kl_coef > 0 else None  # with its graph: the penalty's
    if kl is not None:
        total = total + kl_coef * kl
    with torch.no_grad():
        approx_kl = kl.detach() if kl is not None else _masked_mean(_k3(terms.ratio), valid_mask, count)
    return _output(total, policy_loss, value_loss, mean_entropy, approx_kl, terms, valid_mask, count)


class LossGradients(NamedTuple):
    """The gradient of the APPO loss's total with respect to the policy's outputs, per sample."""

    log_probs: Tensor  # d total / d new_log_probs
    entropy: Tensor  # d total / d entropy
    values: Tensor  # d total / d values


def appo_loss_gradients(
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
    scale: float = 1.0,
) -> tuple[LossOutput, LossGradients]:
    """:func:`appo_loss` without ``kl_coef`` (its ``total`` without a graph), and ``scale`` times the gradient of its
    total with respect to the new log-probs, the entropies and the values, written out: what autograd computes from
    the loss's graph, without the graph (a trainer that differentiates its network by hand,
    :mod:`daskrl.algo.kernels.mlp_gradients`, starts its backward pass from these). CPU tensors only: computed in numpy on
    their memory, where an operation on a minibatch's vector costs about a microsecond against torch's three to four
    (some sixty of them: 57 against 175 us for 512 samples).

    Each derivative is autograd's, ties included: where min / max meet both branches take half the gradient, and a
    clamp passes it at its bounds. Gradients are float32, as the inputs; statistics as :func:`appo_loss`'s, to float
    rounding.
    """
    lp, old_lp, adv, v, old_v, targets, ent = (t.numpy() for t in (new_log_probs, old_log_probs, advantages, values,
                                                                     old_values, value_targets, entropy))
    mask = None if valid_mask is None else valid_mask.numpy().astype(bool)
    count = max(int(mask.sum()) if mask is not None else lp.size, 1)
    terms = _terms(lp, old_lp, adv, v, old_v, targets, clip_ratio, value_clip, ratio_clamp, exp=np.exp)
    out = _array_output(terms, ent, mask, count, entropy_coef, value_coef)
    per_sample = np.float32(scale / count)  # each mean's weight on one (valid) sample
    # the surrogate: min(ratio * A, clipped * A), the clipped branch passing its gradient inside the clip range
    unclipped = _tie_share(terms.by_ratio, terms.by_clipped)
    through_ratio = unclipped + (1 - unclipped) * _within(terms.ratio, 1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio)
    live = _within(terms.raw_ratio, *ratio_clamp)  # the hard clamp passes nothing beyond its bounds
    d_log_probs = adv * through_ratio * live * terms.raw_ratio * -per_sample
    # the value loss: max of the plain and the clipped squared error, halved
    plain = _tie_share(terms.clipped_value_errors, terms.value_errors)
    passes = _within(terms.value_step, -value_clip, value_clip)
    d_values = (plain * (v - targets) + (1 - plain) * (terms.clipped_values - targets) * passes) \
        * (np.float32(value_coef) * per_sample)
    d_entropy = np.full_like(ent, -entropy_coef * per_sample)
    if mask is not None:
        d_log_probs, d_entropy, d_values = (np.where(mask, d, np.float32(0)) for d in (d_log_probs, d_entropy,
                                                                                       d_values))
    return out, LossGradients(*(torch.from_numpy(np.asarray(d, dtype=np.float32))
                                for d in (d_log_probs, d_entropy, d_values)))


def _array_output(terms: _Terms, entropy: np.ndarray, mask: np.ndarray | None, count: int, entropy_coef: float,
                  value_coef: float) -> LossOutput:
    """The loss and its statistics from numpy terms, every mean in one reduction: the surrogate, the value error,
    the entropy, k3, clipped or not, the ratio."""
    ratio = terms.ratio
    rows = np.stack([np.minimum(terms.by_ratio, terms.by_clipped),
                     np.maximum(terms.value_errors, terms.clipped_value_errors), entropy,
                     (ratio - 1) - np.log(ratio), ratio != terms.clipped_ratio, ratio])
    if mask is not None:
        rows = np.where(mask, rows, np.float32(0))  # not a product: an inf in a masked-out sample would give NaN
    surrogate, value_error, mean_entropy, approx_kl, clip_fraction, ratio_mean = \
        (rows.sum(1, dtype=np.float64) / count).tolist()
    policy_loss, value_loss = -surrogate, 0.5 * value_error
    total = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    return LossOutput(torch.tensor(total), total, policy_loss, value_loss, mean_entropy, approx_kl, clip_fraction,
                      ratio_mean)


def _tie_share(smaller: np.ndarray, larger: np.ndarray) -> np.ndarray:
    """The share of min(smaller, larger)'s (or max(larger, smaller)'s) gradient the first argument takes: 1 where it
    is the one chosen, a half where both are equal (autograd's rule), 0 otherwise."""
    return np.where(smaller < larger, np.float32(1), np.where(smaller == larger, np.float32(0.5), np.float32(0)))


def _within(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """1 where ``low <= x <= high`` (where a clamp passes the gradient), else 0."""
    return ((x >= low) & (x <= high)).astype(x.dtype)


def policy_lag_mask(
    sample_versions: Tensor | np.ndarray,
    current_version: int,
    max_policy_lag: int,
) -> Tensor:
    """True where a sample was produced at most ``max_policy_lag`` policy versions ago (still trainable)."""
    versions = torch.as_tensor(sample_versions)
    return (current_version - versions) <= max_policy_lag
