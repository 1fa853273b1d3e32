"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"): Adam's update rescaled per parameter tensor
by a trust ratio, ``--optimizer lamb``.

Why: with large batches one learning rate does not fit every layer; LAMB makes each tensor's step a fixed fraction
of its own norm, whatever the scale of its gradients. Per parameter tensor ``x`` with gradient ``g`` at step ``t``::

    m = b1 m + (1 - b1) g              v = b2 v + (1 - b2) g^2
    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * x
    x = x - lr * (min(|x|, max_weight_norm) / |u|) * u         (ratio 1 where |x| or |u| is 0)

The moments are stored under Adam's names (``step``, ``exp_avg``, ``exp_avg_sq``), so a checkpoint's optimizer
state reads the same way for every ``--optimizer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class Lamb(torch.optim.Optimizer):
    """LAMB over ``params``: ``lr``, Adam's ``betas`` and ``eps``, decoupled ``weight_decay`` (inside the trust
    ratio, as in the paper), and ``max_weight_norm``, the cap on a tensor's norm in the ratio (the paper's
    scaling function phi), which keeps a large tensor's step bounded."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, max_weight_norm: float = 10.0) -> None:
        if not lr > 0 or not eps > 0 or weight_decay < 0 or not max_weight_norm > 0:
            raise ValueError(f"Lamb needs lr > 0, eps > 0, weight_decay >= 0 and max_weight_norm > 0, got lr={lr}, "
                             f"eps={eps}, weight_decay={weight_decay}, max_weight_norm={max_weight_norm}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Lamb betas must be in [0, 1), got {betas}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "max_weight_norm": max_weight_norm}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One LAMB update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group)
        return loss

    def _update(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        if p.grad.is_sparse:
            raise RuntimeError("Lamb does not support sparse gradients")
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        beta1, beta2 = group["betas"]
        state["step"] = state["step"] + 1  # a new tensor: a loaded state dict may share the old one
        t = float(state["step"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(p.grad, alpha=1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
        denom = (exp_avg_sq / (1.0 - beta2 ** t)).sqrt_().add_(group["eps"])
        update = (exp_avg / (1.0 - beta1 ** t)).div_(denom)
        if group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
        # on the parameter's device, without reading the norms back (no sync per tensor on a GPU)
        weight_norm = p.norm().clamp(max=group["max_weight_norm"])
        update_norm = update.norm()
        trust = torch.where((weight_norm > 0) & (update_norm > 0), weight_norm / update_norm,
                            torch.ones_like(weight_norm))
        p.add_(update.mul_(trust), alpha=-group["lr"])
