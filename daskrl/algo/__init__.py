"""Pure torch/numpy RL math: advantage estimators, the APPO loss and running normalisers."""

from daskrl.algo.advantages import gae, vtrace
from daskrl.algo.appo_loss import LossOutput, appo_loss, policy_lag_mask
from daskrl.algo.normalizers import ReturnNormalizer, RunningMeanStd

__all__ = [
    "LossOutput",
    "ReturnNormalizer",
    "RunningMeanStd",
    "appo_loss",
    "gae",
    "policy_lag_mask",
    "vtrace",
]
