"""The learner's optimizer, ``--optimizer adam|adamw|lamb`` with ``--weight-decay``, and how its state is saved and
loaded.

Why a module: the trainer only steps an optimizer; which one, with what settings, and whether a checkpoint's moments
fit it are decided here, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.lamb import Lamb
from daskrl.algo.kernels.eager_optim import EagerAdam, EagerAdamW

if TYPE_CHECKING:
    from daskrl.config import LearnerConfig

#: the values of --optimizer
OPTIMIZERS = ("adam", "adamw", "lamb")
#: Adam's epsilon for every optimizer (CleanRL's and Sample Factory's PPO value, as daskrl always used)
EPS = 1e-5


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: LearnerConfig, lr: float) -> torch.optim.Optimizer:
    """The optimizer ``cfg.optimizer`` names over ``params``. Adam and AdamW take torch's fused kernel (one update
    of every parameter in one call, same arithmetic, same state dict) where every parameter is a float tensor on
    the CPU or a GPU; otherwise ``foreach``, one multi-tensor update instead of a Python loop over parameters (on
    CPU torch defaults to the loop). bench_learner's CartPole MLP step gains about 5% over foreach. Adam and AdamW
are :mod:`daskrl.algo.kernels.eager_optim`'s, which never import torch._dynamo."""
    params = list(params)
    kernel = {"fused": True} if _fusable(params) else {"foreach": True}
    if cfg.optimizer == "adam":
        return EagerAdam(params, lr=lr, eps=EPS, **kernel)
    if cfg.optimizer == "adamw":
        return EagerAdamW(params, lr=lr, eps=EPS, weight_decay=cfg.weight_decay, **kernel)
    if cfg.optimizer == "lamb":
        return Lamb(params, lr=lr, eps=EPS, weight_decay=cfg.weight_decay)
    raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {cfg.optimizer!r}")


def adam(params: Iterable[torch.nn.Parameter], lr: float, **settings: Any) -> EagerAdam:
    """Adam with torch's fused kernel where :func:`make_optimizer` would take it, ``foreach`` otherwise (the off-policy
    trainers' optimizers, with torch's default epsilon)."""
    params = list(params)
    return EagerAdam(params, lr=lr, **settings, **({"fused": True} if _fusable(params) else {"foreach": True}))


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(parameters, max_norm)``: the same operations in the same order (each
    gradient's norm in one foreach call, the norm of those norms, one scale of every gradient by
    min(1, max_norm / (norm + 1e-6))), so the same result to the bit, without its grouping of the gradients by device
    and dtype (184 of a CartPole learner's 1,700 us a minibatch). Gradients on several devices or of several dtypes,
    or of a kind foreach does not take, go to torch's function."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    kinds = {(g.device, g.dtype, g.layout) for g in grads}
    if len(kinds) != 1 or grads[0].layout != torch.strided or grads[0].device.type not in ("cpu", "cuda"):
        return torch.nn.utils.clip_grad_norm_(grads, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def _fusable(params: list[torch.nn.Parameter]) -> bool:
    devices = {p.device.type for p in params}
    return bool(params) and devices <= {"cpu", "cuda"} and len({p.device for p in params}) == 1 \
        and all(p.is_floating_point() for p in params)


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any], cfg: LearnerConfig) -> bool:
    """Load a trainer state's optimizer moments into ``optimizer``; False (nothing loaded: the moments start afresh)
    when the state was saved by another ``--optimizer`` (a state without the name is Adam's, the only optimizer
    before there was a choice). The run's own settings stay: torch would take the saved weight decay with the
    moments, and ``--resume --weight-decay X`` must win, as ``--learning-rate`` does."""
    if state.get("optimizer_name", "adam") != cfg.optimizer:
        return False
    optimizer.load_state_dict(state["optimizer"])
    if cfg.optimizer != "adam":
        for group in optimizer.param_groups:
            group["weight_decay"] = cfg.weight_decay
    return True
