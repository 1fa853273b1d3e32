"""Pure torch/numpy RL math: advantage estimators, the APPO loss and running normalisers.

The names below are imported on first use (PEP 562): the driver imports this package's torch-free modules (the
trajectory batch a batcher builds) without importing torch. The loss function is not among them: once its module
``daskrl.algo.appo_loss`` is imported, that name is the module (import it from there).
"""

from __future__ import annotations

from daskrl.lazy_names import lazy_names

_HOMES = {
    "gae": "advantages", "vtrace": "advantages",
    "LossOutput": "appo_loss", "policy_lag_mask": "appo_loss",
    "ReturnNormalizer": "normalizers", "RunningMeanStd": "normalizers",
}

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
