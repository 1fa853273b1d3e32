"""Action distributions and the linear heads that produce them.

Hand-rolled instead of torch.distributions: sampling runs on every inference
batch, and these skip argument validation, broadcasting checks and lazy
properties. Every distribution exposes sample(generator=None), mode(), log_prob(a), entropy(),
with the batch shape as the result shape of log_prob/entropy; a sampler passes a split's own generator
(daskrl/sampling/acting.py), anything else draws from torch's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from daskrl.envs.layouts.composite_actions import ActionPart
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.composite_head import CompositeDistribution, CompositeHead
from daskrl.models.inputs.encoders import layer_init

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Categorical:
    """Categorical over the last dim of `logits`."""

    def __init__(self, logits: torch.Tensor) -> None:
        # Normalized log-probs; clamping keeps -inf (masked) logits from producing NaN entropy.
        logits = logits.clamp(min=torch.finfo(logits.dtype).min)
        self.logits = logits - logits.logsumexp(-1, keepdim=True)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        # Gumbel-max: argmax(logits + Gumbel) with Gumbel = -log(Exponential(1)).
        noise = torch.empty_like(self.logits).exponential_(generator=generator).log_()
        return (self.logits - noise).argmax(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)


class MultiCategorical:
    """Independent categoricals, one per MultiDiscrete component; actions have a trailing dim."""

    def __init__(self, logits: torch.Tensor, nvec: Sequence[int]) -> None:
        self.dists = [Categorical(part) for part in torch.split(logits, list(nvec), dim=-1)]

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.stack([d.sample(generator) for d in self.dists], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.stack([d.mode() for d in self.dists], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(d.log_prob(actions[..., i]) for i, d in enumerate(self.dists))

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy() for d in self.dists)


class DiagGaussian:
    """Diagonal Gaussian over the last dim; actions are flat (batch, action_dim) and unbounded."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype, device=self.mean.device)
        return self.mean + self.log_std.exp() * noise

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - _HALF_LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum(-1)


class ClippedGaussian(DiagGaussian):
    """A diagonal Gaussian whose samples are clipped to the action Box, with the probability of what is sent.

    The env gets ``clip(u)``, so that is the action stored and trained on. Its probability puts the Gaussian's whole
    tail beyond a bound onto the bound: log p = log N(a) inside, log Phi((low - mean) / std) at ``low`` and
    log Phi((mean - high) / std) at ``high`` (clipped-action policy gradient, Fujita and Maeda 2018). The gradient
    is unbiased and of lower variance than the unclipped sample's, and the learner's ratio compares the
    probabilities of the action the env really got. Entropy is the underlying Gaussian's.
    """

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__(mean, log_std)
        self.low, self.high = low, high

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.clamp(super().sample(generator), self.low, self.high)

    def mode(self) -> torch.Tensor:
        return torch.clamp(self.mean, self.low, self.high)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        inv_std = torch.exp(-self.log_std)
        z = (actions - self.mean) * inv_std
        inside = -0.5 * z.square() - self.log_std - _HALF_LOG_2PI
        at_low = torch.special.log_ndtr((self.low - self.mean) * inv_std)
        at_high = torch.special.log_ndtr((self.mean - self.high) * inv_std)
        per_dim = torch.where(actions <= self.low, at_low, torch.where(actions >= self.high, at_high, inside))
        return per_dim.sum(-1)


class SquashedGaussian(DiagGaussian):
    """A diagonal Gaussian squashed into the action Box by tanh: ``a = low + (tanh(u) + 1) / 2 * (high - low)``.

    Every sample is inside the Box and its log-probability carries the change of variables, log N(u) - sum
    log(1 - tanh(u)^2) - sum log((high - low) / 2), so it is the density of the action sent. The stored action is
    mapped back to u (atanh, kept 1e-6 inside the open interval). Entropy is the underlying Gaussian's.
    """

    EPS = 1e-6

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__(mean, log_std)
        self.center, self.half = (high + low) / 2, (high - low) / 2

    def _to_box(self, u: torch.Tensor) -> torch.Tensor:
        return self.center + torch.tanh(u) * self.half

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return self._to_box(super().sample(generator))

    def mode(self) -> torch.Tensor:
        return self._to_box(self.mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        y = ((actions - self.center) / self.half).clamp(-1 + self.EPS, 1 - self.EPS)
        u = torch.atanh(y)
        return super().log_prob(u) - (torch.log1p(-y.square()) + torch.log(self.half)).sum(-1)


class SquashedMeanNoise(ClippedGaussian):
    """TD3's exploration (Fujimoto et al. 2018): the mean squashed into the Box by tanh, plus Gaussian noise of std
    ``exp(log_std)`` half-widths of the Box, clipped to the Box.

    The noise comes after the squash. Under it (:class:`SquashedGaussian`'s sample) the noise vanishes where tanh
    saturates, so an actor whose mean ran past the bounds stopped exploring and the critics never saw another action:
    daskrl's TD3 on HalfCheetah-v5 sat at every bound with pre-squash means of 7 to 17 after 15k steps. The action sent
    is a clipped Gaussian around the squashed mean, so its probability is :class:`ClippedGaussian`'s.
    """

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> None:
        self.center, self.half = (high + low) / 2, (high - low) / 2
        super().__init__(self.center + torch.tanh(mean) * self.half, log_std + torch.log(self.half), low, high)


Distribution = Categorical | MultiCategorical | DiagGaussian | CompositeDistribution


def masked(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Logits with the actions ``mask`` forbids (0 there, one entry per logit) at -inf, so they are never sampled and
    carry no gradient; a row that forbids every action is left as it is (the env's bug, not a NaN in the loss)."""
    if mask is None:
        return logits
    allowed = mask > 0.5
    allowed = allowed | ~allowed.any(-1, keepdim=True)
    return logits.masked_fill(~allowed, float("-inf"))


class CategoricalHead(nn.Module):
    def __init__(self, in_dim: int, num_actions: int) -> None:
        super().__init__()
        self.logits = layer_init(nn.Linear(in_dim, num_actions), std=0.01)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> Categorical:
        return Categorical(masked(self.logits(features), mask))


class MultiDiscreteHead(nn.Module):
    def __init__(self, in_dim: int, nvec: Sequence[int]) -> None:
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.logits = layer_init(nn.Linear(in_dim, sum(self.nvec)), std=0.01)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> MultiCategorical:
        return MultiCategorical(masked(self.logits(features), mask), self.nvec)


#: how a Gaussian policy meets a bounded action Box (``--action-bounds``)
ACTION_BOUNDS = {"clip": ClippedGaussian, "squash": SquashedGaussian, "squash_mean": SquashedMeanNoise}


#: the range of a state-dependent log-std (SAC's usual clamp: a std between 2e-9 and 7.4)
LOG_STD_RANGE = (-20.0, 2.0)


class GaussianHead(nn.Module):
    """Mean from features; log_std is a free parameter (state-independent), as in CleanRL, or with ``std="state"`` a
    head on the features (SAC's). Actions are bounded by the Box as ``bounds`` says (clip or squash); a Box with an
    infinite bound is left unbounded."""

    def __init__(self, in_dim: int, spaces: EnvSpaces | ActionPart, init_log_std: float, bounds: str,
                 std: str = "parameter") -> None:
        super().__init__()
        action_dim = spaces.action_dim
        self.mean = layer_init(nn.Linear(in_dim, action_dim), std=0.01)
        self.state_std = std == "state"
        if self.state_std:
            self.log_std_head = layer_init(nn.Linear(in_dim, action_dim), std=0.01, bias=float(init_log_std))
        else:
            self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        low = torch.tensor(spaces.low if spaces.low is not None else [-math.inf] * action_dim, dtype=torch.float32)
        high = torch.tensor(spaces.high if spaces.high is not None else [math.inf] * action_dim, dtype=torch.float32)
        bounded = bool(torch.isfinite(low).all() and torch.isfinite(high).all())
        self.register_buffer("low", low, persistent=False)
        self.register_buffer("high", high, persistent=False)
        self.distribution = ACTION_BOUNDS[bounds] if bounded else None

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> DiagGaussian:
        mean = self.mean(features)
        log_std = self.log_std_head(features).clamp(*LOG_STD_RANGE) if self.state_std else self.log_std
        if self.distribution is None:
            return DiagGaussian(mean, log_std)
        return self.distribution(mean, log_std, self.low, self.high)


def make_action_head(in_dim: int, spaces: EnvSpaces | ActionPart, init_log_std: float, bounds: str,
                     std: str = "parameter") -> nn.Module:
    """The head of an env's actions, or of one part of a Tuple or Dict action (each part gets the head of its kind:
    daskrl/models/composite_head.py); ``std``: how a Gaussian head's std is made (``--gaussian-std``)."""
    if spaces.action_kind == "composite":
        layout = spaces.action_layout
        return CompositeHead(layout, [make_action_head(in_dim, part, init_log_std, bounds, std)
                                      for part in layout.parts])
    if spaces.action_kind == "discrete":
        return CategoricalHead(in_dim, int(spaces.num_actions))
    if spaces.action_kind == "multi_discrete":
        return MultiDiscreteHead(in_dim, spaces.nvec or [])
    return GaussianHead(in_dim, spaces, init_log_std, bounds, std)
