"""What the off-policy trainers share when they train on several replay minibatches in a row (one learner request's
worth): which minibatches are finite, and the per-update metrics kept as tensors until the last update.

Converting a metric to a Python number waits for the device and costs a call per value; gathering them as 0-d
tensors and converting all of them once per request keeps the updates themselves free of that overhead.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


def finite_rows(batches: dict[str, np.ndarray], fields: Iterable[str]) -> np.ndarray:
    """[K] bool: whether minibatch k's float ``fields`` ([K, B, ...] each) hold only finite values (integer fields,
    such as uint8 frames, always do)."""
    count = len(batches[next(iter(fields))])
    ok = np.ones(count, bool)
    for name in fields:
        values = batches[name]
        if np.issubdtype(values.dtype, np.floating):
            ok &= np.isfinite(values.reshape(count, -1)).all(axis=1)
    return ok


class StepMetrics:
    """Per-update scalar metrics as 0-d tensors; :meth:`means` turns them into numbers in one go."""

    def __init__(self) -> None:
        self.values: dict[str, list[torch.Tensor]] = {}

    def add(self, metrics: dict[str, torch.Tensor]) -> None:
        for name, value in metrics.items():
            self.values.setdefault(name, []).append(value.detach().reshape(()).float())

    def means(self) -> dict[str, float]:
        """{name: mean over the updates added} (empty if none was)."""
        if not self.values:
            return {}
        names = list(self.values)
        stacked = torch.stack([torch.stack(self.values[name]).mean() for name in names]).cpu().tolist()
        return dict(zip(names, stacked, strict=True))


def skipped_metrics(count: int) -> dict[str, float]:
    """The metrics of ``count`` minibatches none of which updated the networks."""
    return {"updates": 0, "skipped_updates": count}
