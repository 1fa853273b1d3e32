"""The action head of Tuple and Dict action spaces: one head per part, over the flat action row.

A composite action is one float32 row per step (daskrl/envs/layouts/composite_actions.py); each part's head (categorical,
multi-categorical, Gaussian with the run's ``--action-bounds``) owns its columns of that row. The parts are
independent given the features, so the log-probability of a row is the sum of the parts' log-probabilities and the
entropy the sum of their entropies: the loss, V-trace's ratios and the entropy bonus need nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from daskrl.envs.layouts.composite_actions import ActionLayout


class CompositeDistribution:
    """Independent distributions, one per part, over the columns of a flat action row [batch, width]."""

    def __init__(self, dists: Sequence[Any], columns: Sequence[tuple[int, int]], scalar: Sequence[bool]) -> None:
        """``columns[k]``: part k's columns ``(start, stop)``; ``scalar[k]``: part k takes one index (Discrete),
        which its categorical wants without a trailing dim."""
        self.dists, self.columns, self.scalar = list(dists), list(columns), list(scalar)

    def _row(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The parts' actions side by side as a float32 row (discrete indices as exact small floats)."""
        return torch.cat([p.unsqueeze(-1).float() if one else p.float() for p, one in zip(parts, self.scalar,
                                                                                          strict=True)], dim=-1)

    def _part(self, actions: torch.Tensor, k: int) -> torch.Tensor:
        a, b = self.columns[k]
        return actions[..., a] if self.scalar[k] else actions[..., a:b]

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return self._row([d.sample(generator) for d in self.dists])

    def mode(self) -> torch.Tensor:
        return self._row([d.mode() for d in self.dists])

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(d.log_prob(self._part(actions, k)) for k, d in enumerate(self.dists))

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy() for d in self.dists)


class CompositeHead(nn.Module):
    """The parts' heads side by side (``parts``, in the layout's order, built by ``make_action_head`` from each
    :class:`~daskrl.envs.layouts.composite_actions.ActionPart`). An action mask covers the discrete parts' logits in part
    order, and each discrete head gets its own share of it."""

    def __init__(self, layout: ActionLayout, heads: Sequence[nn.Module]) -> None:
        super().__init__()
        self.parts = nn.ModuleList(heads)
        self.columns = [(p.offset, p.offset + p.action_dim) for p in layout.parts]
        self.scalar = [p.action_kind == "discrete" for p in layout.parts]
        self.mask_widths = [p.num_logits for p in layout.parts]

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> CompositeDistribution:
        dists, start = [], 0
        for head, width in zip(self.parts, self.mask_widths, strict=True):
            part_mask = None if mask is None or not width else mask[..., start:start + width]
            start += width
            dists.append(head(features, part_mask))
        return CompositeDistribution(dists, self.columns, self.scalar)
