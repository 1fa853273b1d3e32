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
    """Per-update scalar metrics, one stacked tensor per update; :meth:`means` turns them into numbers in one go."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.rows: list[torch.Tensor] = []

    def add(self, metrics: dict[str, torch.Tensor]) -> None:
        """One update's 0-d tensors (the same names every time)."""
        self.names = self.names or list(metrics)
        with torch.no_grad():
            self.rows.append(torch.stack([metrics[name].reshape(()).float() for name in self.names]))

    def means(self) -> dict[str, float]:
        """{name: mean over the updates added} (empty if none was)."""
        if not self.rows:
            return {}
        return dict(zip(self.names, torch.stack(self.rows).mean(0).cpu().tolist(), strict=True))


def grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The gradients' total norm, clipped to ``max_norm`` first where it is above 0 (0: no clipping, and then no
    multiplication by a clip coefficient of exactly 1 either)."""
    if max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])


def skipped_metrics(count: int) -> dict[str, float]:
    """The metrics of ``count`` minibatches none of which updated the networks."""
    return {"updates": 0, "skipped_updates": count}
