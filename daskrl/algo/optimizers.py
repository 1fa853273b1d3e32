"""The learner's optimizer, ``--optimizer adam|adamw|lamb`` with ``--weight-decay``, and how its state is saved and
loaded.

Why a module: the trainer only steps an optimizer; which one, with what settings, and whether a checkpoint's moments
fit it are decided here, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.lamb import Lamb

if TYPE_CHECKING:
    from daskrl.config import LearnerConfig

#: the values of --optimizer
OPTIMIZERS = ("adam", "adamw", "lamb")
#: Adam's epsilon for every optimizer (CleanRL's and Sample Factory's PPO value, as daskrl always used)
EPS = 1e-5


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: LearnerConfig, lr: float) -> torch.optim.Optimizer:
    """The optimizer ``cfg.optimizer`` names over ``params``. ``foreach``: one multi-tensor update instead of a Python
    loop over parameters; on CPU torch defaults to the loop, and the small CartPole learner step is faster this way
    (same arithmetic, same state dict)."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, eps=EPS, foreach=True)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, eps=EPS, weight_decay=cfg.weight_decay, foreach=True)
    if cfg.optimizer == "lamb":
        return Lamb(params, lr=lr, eps=EPS, weight_decay=cfg.weight_decay)
    raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {cfg.optimizer!r}")


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
