"""Pure torch/numpy RL math: advantage estimators, the APPO loss and running normalisers.

The names below are imported on first use (PEP 562): the driver imports this package's torch-free modules (the
trajectory batch a batcher builds) without importing torch. The loss function is not among them: once its module
``daskrl.algo.appo_loss`` is imported, that name is the module (import it from there).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "gae": "advantages", "vtrace": "advantages",
    "LossOutput": "appo_loss", "policy_lag_mask": "appo_loss",
    "ReturnNormalizer": "normalizers", "RunningMeanStd": "normalizers",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'daskrl.algo' has no attribute {name!r}")
    return getattr(importlib.import_module(f"daskrl.algo.{_HOMES[name]}"), name)
