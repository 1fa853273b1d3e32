"""The APPO loss's gradient with respect to the policy's outputs, written out in numpy: :func:`appo_loss_gradients`.

Why: a trainer that differentiates its network by hand (:mod:`daskrl.algo.kernels.mlp_gradients`) starts its
backward pass from the loss's derivatives in the log-probs, the entropies and the values. Autograd would take them
from the loss's graph; written out on the tensors' memory in numpy, an operation on a minibatch's vector costs about
a microsecond against torch's three to four (some sixty of them: 57 against 175 us for 512 samples). The reference is
:func:`daskrl.algo.appo.loss.appo_loss`: the same terms in the same order, and tests/unit/test_mlp_gradients.py holds the
two together (statistics and every derivative, ties included).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from daskrl.algo.appo.loss import LossOutput


class LossGradients(NamedTuple):
    """The gradient of the APPO loss's total with respect to the policy's outputs, per sample."""

    log_probs: Tensor  # d total / d new_log_probs
    entropy: Tensor  # d total / d entropy
    values: Tensor  # d total / d values


class _Terms(NamedTuple):
    """The per-sample quantities the loss is made of, as :func:`~daskrl.algo.appo.loss.appo_loss` computes them."""

    raw_ratio: np.ndarray  # exp(new - old log-prob)
    ratio: np.ndarray  # raw_ratio hard-clamped to ratio_clamp
    clipped_ratio: np.ndarray  # ratio clipped to [1 / (1 + e), 1 + e]
    by_ratio: np.ndarray  # ratio * advantages
    by_clipped: np.ndarray  # clipped_ratio * advantages
    value_step: np.ndarray  # values - old_values
    clipped_values: np.ndarray  # old_values + value_step clamped to +-value_clip
    value_errors: np.ndarray  # (values - targets)^2
    clipped_value_errors: np.ndarray  # (old_values + clamp(value_step) - targets)^2


def _terms(new_log_probs: np.ndarray, old_log_probs: np.ndarray, advantages: np.ndarray, values: np.ndarray,
           old_values: np.ndarray, value_targets: np.ndarray, clip_ratio: float, value_clip: float,
           ratio_clamp: tuple[float, float]) -> _Terms:
    """The loss's per-sample terms (see :class:`_Terms`)."""
    raw_ratio = np.exp(new_log_probs - old_log_probs)
    ratio = raw_ratio.clip(ratio_clamp[0], ratio_clamp[1])
    clipped_ratio = ratio.clip(1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio)
    value_step = values - old_values
    values_clipped = old_values + value_step.clip(-value_clip, value_clip)
    return _Terms(raw_ratio, ratio, clipped_ratio, ratio * advantages, clipped_ratio * advantages, value_step,
                  values_clipped, (values - value_targets) ** 2, (values_clipped - value_targets) ** 2)


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
    """:func:`~daskrl.algo.appo.loss.appo_loss` without ``kl_coef`` (its ``total`` without a graph), and ``scale``
    times the gradient of its total with respect to the new log-probs, the entropies and the values, written out:
    what autograd computes from the loss's graph, without the graph. CPU tensors only (numpy on their memory).

    Each derivative is autograd's, ties included: where min / max meet both branches take half the gradient, and a
    clamp passes it at its bounds. Gradients are float32, as the inputs; statistics as ``appo_loss``'s, to float
    rounding.
    """
    lp, old_lp, adv, v, old_v, targets, ent = (t.numpy() for t in (new_log_probs, old_log_probs, advantages, values,
                                                                     old_values, value_targets, entropy))
    mask = None if valid_mask is None else valid_mask.numpy().astype(bool)
    count = max(int(mask.sum()) if mask is not None else lp.size, 1)
    terms = _terms(lp, old_lp, adv, v, old_v, targets, clip_ratio, value_clip, ratio_clamp)
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
