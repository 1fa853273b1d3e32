"""The learning rate a training step trains with, ``--lr-schedule constant|linear|kl_adaptive``.

- ``linear``: the policy's learning rate decays with the env steps over the run's budget (to 5% at the end).
- ``kl_adaptive`` (Sample Factory's ``kl_adaptive_epoch``): after every epoch the rate follows the policy's change.
  When the epoch's mean KL(behaviour || current) is above twice ``--lr-schedule-kl-threshold`` the rate is divided by
  1.5, below half of it multiplied by 1.5, and it is kept within ``[--lr-adaptive-min, --lr-adaptive-max]``. The
  adapted rate is the policy's own from then on (PBT mutates it, a checkpoint keeps it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daskrl.config import LearnerConfig

#: the values of --lr-schedule
SCHEDULES = ("constant", "linear", "kl_adaptive")
#: what kl_adaptive divides or multiplies the rate by (Sample Factory's factor)
KL_ADAPT_FACTOR = 1.5
#: linear: the fraction of the rate left at the end of the budget
LINEAR_FLOOR = 0.05


def scheduled_lr(cfg: LearnerConfig, lr: float, env_steps: int, total_env_steps: int) -> float:
    """The rate a step starts with: ``lr`` (the policy's current one), decayed by the linear schedule when it is
    chosen and the run has a budget (``total_env_steps`` > 0)."""
    if cfg.lr_schedule == "linear" and total_env_steps > 0:
        return lr * max(LINEAR_FLOOR, 1.0 - env_steps / total_env_steps)
    return lr


def kl_adapted_lr(lr: float, kl: float, cfg: LearnerConfig) -> float:
    """The rate after an epoch whose mean KL estimate was ``kl``: down by :data:`KL_ADAPT_FACTOR` above twice the
    target, up below half of it, unchanged between; always within the bounds."""
    target = cfg.lr_schedule_kl_threshold
    if kl > 2.0 * target:
        lr = lr / KL_ADAPT_FACTOR
    elif kl < 0.5 * target:
        lr = lr * KL_ADAPT_FACTOR
    return min(max(lr, cfg.lr_adaptive_min), cfg.lr_adaptive_max)
