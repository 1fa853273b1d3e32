"""Action distributions and the linear heads that produce them.

Hand-rolled instead of torch.distributions: sampling runs on every inference
batch, and these skip argument validation, broadcasting checks and lazy
properties. Every distribution exposes sample(), mode(), log_prob(a), entropy(),
with the batch shape as the result shape of log_prob/entropy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from daskrl.envs.spaces import EnvSpaces
from daskrl.models.encoders import layer_init

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Categorical:
    """Categorical over the last dim of `logits`."""

    def __init__(self, logits: torch.Tensor) -> None:
        # Normalized log-probs; clamping keeps -inf (masked) logits from producing NaN entropy.
        logits = logits.clamp(min=torch.finfo(logits.dtype).min)
        self.logits = logits - logits.logsumexp(-1, keepdim=True)

    def sample(self) -> torch.Tensor:
        # Gumbel-max: argmax(logits + Gumbel) with Gumbel = -log(Exponential(1)).
        noise = torch.empty_like(self.logits).exponential_().log_()
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

    def sample(self) -> torch.Tensor:
        return torch.stack([d.sample() for d in self.dists], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.stack([d.mode() for d in self.dists], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(d.log_prob(actions[..., i]) for i, d in enumerate(self.dists))

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy() for d in self.dists)


class DiagGaussian:
    """Diagonal Gaussian over the last dim; actions are flat (batch, action_dim) and unclipped."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def sample(self) -> torch.Tensor:
        return self.mean + self.log_std.exp() * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - _HALF_LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum(-1)


Distribution = Categorical | MultiCategorical | DiagGaussian


class CategoricalHead(nn.Module):
    def __init__(self, in_dim: int, num_actions: int) -> None:
        super().__init__()
        self.logits = layer_init(nn.Linear(in_dim, num_actions), std=0.01)

    def forward(self, features: torch.Tensor) -> Categorical:
        return Categorical(self.logits(features))


class MultiDiscreteHead(nn.Module):
    def __init__(self, in_dim: int, nvec: Sequence[int]) -> None:
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.logits = layer_init(nn.Linear(in_dim, sum(self.nvec)), std=0.01)

    def forward(self, features: torch.Tensor) -> MultiCategorical:
        return MultiCategorical(self.logits(features), self.nvec)


class GaussianHead(nn.Module):
    """Mean from features; log_std is a free parameter (state-independent), as in CleanRL."""

    def __init__(self, in_dim: int, action_dim: int, init_log_std: float = 0.0) -> None:
        super().__init__()
        self.mean = layer_init(nn.Linear(in_dim, action_dim), std=0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, features: torch.Tensor) -> DiagGaussian:
        return DiagGaussian(self.mean(features), self.log_std)


def make_action_head(in_dim: int, spaces: EnvSpaces, init_log_std: float = 0.0) -> nn.Module:
    if spaces.action_kind == "discrete":
        return CategoricalHead(in_dim, int(spaces.num_actions))
    if spaces.action_kind == "multi_discrete":
        return MultiDiscreteHead(in_dim, spaces.nvec or [])
    return GaussianHead(in_dim, spaces.action_dim, init_log_std)
