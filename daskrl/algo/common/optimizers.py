"""The learner's optimizer, ``--optimizer adam|adamw|lamb`` with ``--weight-decay``, and how its state is saved and
loaded.

Why a module: the trainer only steps an optimizer; which one, with what settings, and whether a checkpoint's moments
fit it are decided here, once. How Adam and AdamW compute (torch.optim's, or with the fused kernel called directly)
is ``--learner-kernels``'s: the trainer's :class:`~daskrl.algo.common.plain_torch.PlainTorch` makes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.lamb import Lamb

if TYPE_CHECKING:
    from daskrl.algo.common.plain_torch import PlainTorch
    from daskrl.config import LearnerConfig

#: the values of --optimizer
OPTIMIZERS = ("adam", "adamw", "lamb")
#: Adam's epsilon for every optimizer (CleanRL's and Sample Factory's PPO value, as daskrl always used)
EPS = 1e-5
#: a parameter group's settings that say how the optimizer computes, not what: a checkpoint's are those of the run
#: that saved it (its --learner-kernels), and the loading run keeps its own
IMPLEMENTATION = ("fused", "foreach")


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: LearnerConfig, lr: float, kernels: PlainTorch
                   ) -> torch.optim.Optimizer:
    """The optimizer ``cfg.optimizer`` names over ``params``; Adam and AdamW as ``kernels`` makes them
    (``--learner-kernels``)."""
    params = list(params)
    if cfg.optimizer == "adam":
        return kernels.adam(params, lr=lr, eps=EPS)
    if cfg.optimizer == "adamw":
        return kernels.adam(params, adamw=True, lr=lr, eps=EPS, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "lamb":
        return Lamb(params, lr=lr, eps=EPS, weight_decay=cfg.weight_decay)
    raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {cfg.optimizer!r}")


def load_moments(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(saved)``, the optimizer's own :data:`IMPLEMENTATION` settings kept (torch would
    take the saved ones: a run resumed with ``--learner-kernels off`` would step with the fused kernel it left out),
    and each parameter's step count its own tensor: ``auto``'s flat moments share one among all parameters
    (:mod:`daskrl.algo.kernels.eager_optim`), which torch's Adam would count up once per parameter a step."""
    own = [{k: group[k] for k in IMPLEMENTATION if k in group} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, settings in zip(optimizer.param_groups, own, strict=True):
        group.update(settings)
    counts: set[int] = set()
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            if id(step) in counts:
                state["step"] = step.clone()
            counts.add(id(state["step"]))


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any], cfg: LearnerConfig) -> bool:
    """Load a trainer state's optimizer moments into ``optimizer``; False (nothing loaded: the moments start afresh)
    when the state was saved by another ``--optimizer`` (a state without the name is Adam's, the only optimizer
    before there was a choice). The run's own settings stay: torch would take the saved weight decay with the
    moments, and ``--resume --weight-decay X`` must win, as ``--learning-rate`` does."""
    if state.get("optimizer_name", "adam") != cfg.optimizer:
        return False
    load_moments(optimizer, state["optimizer"])
    if cfg.optimizer != "adam":
        for group in optimizer.param_groups:
            group["weight_decay"] = cfg.weight_decay
    return True
