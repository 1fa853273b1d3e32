"""Running statistics for observation and value-target normalisation.

Statistics are kept in float64 numpy so that long runs (billions of samples) do not lose precision, and
serialise to plain floats/lists so checkpoints stay loadable with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

ArrayLike = TypeVar("ArrayLike", np.ndarray, Tensor)


def _to_numpy(x: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


class RunningMeanStd:
    """Mean/variance of a stream of batches, merged with the parallel algorithm of Chan et al.

    Each ``update`` treats axis 0 of ``x`` as the batch axis; the remaining axes must equal ``shape``.
    The result is exactly the (population, ddof=0) mean/var of all batches concatenated, so stats from
    several workers can also be merged in any order via ``update_from_moments``.
    """

    def __init__(self, shape: Sequence[int] = (), var_epsilon: float = 1e-8) -> None:
        self.shape = tuple(shape)
        self.var_epsilon = var_epsilon
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.var = np.ones(self.shape, dtype=np.float64)
        self.count = 0.0

    def update(self, x: Tensor | np.ndarray) -> None:
        batch = _to_numpy(x)
        if batch.shape[1:] != self.shape:
            raise ValueError(f"expected batch shaped (N, *{self.shape}), got {batch.shape}")
        if batch.shape[0] == 0:
            return
        self.update_from_moments(batch.mean(axis=0), batch.var(axis=0), batch.shape[0])

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        if batch_count <= 0:
            return
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean = self.mean + delta * batch_count / total
        self.var = m2 / total
        self.count = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var + self.var_epsilon)

    def normalize(self, x: ArrayLike, clip: float | None = 5.0) -> ArrayLike:
        """(x - mean) / std, clipped to [-clip, clip]; returns the input's type, dtype and device."""
        if isinstance(x, Tensor):
            mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device)
            std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device)
            out = (x - mean) / std
            return out.clamp(-clip, clip) if clip is not None else out
        arr = np.asarray(x)
        out_np = ((arr - self.mean) / self.std).astype(arr.dtype if arr.dtype.kind == "f" else np.float32)
        return np.clip(out_np, -clip, clip) if clip is not None else out_np

    def state_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "mean": self.mean.tolist(),
            "var": self.var.tolist(),
            "count": float(self.count),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        shape = tuple(state["shape"])
        if shape != self.shape:
            raise ValueError(f"state shape {shape} does not match {self.shape}")
        self.mean = np.asarray(state["mean"], dtype=np.float64).reshape(shape)
        self.var = np.asarray(state["var"], dtype=np.float64).reshape(shape)
        self.count = float(state["count"])


class ReturnNormalizer:
    """Normalises value-head targets (returns) with running scalar statistics.

    Chosen over SB3-style per-env reward scaling because it lives entirely in the learner: rewards stay raw
    in rollouts, and no per-env discounted-return state has to be tracked or synchronised across async
    rollout workers. The value head predicts *normalised* values. Learner step:

        raw_values = rn.denormalize(values)          # back to reward scale for GAE / V-trace
        targets = vtrace(..., raw_values, ...)[0]
        rn.update(targets)
        loss on (values, rn.normalize(targets))
    """

    def __init__(self, var_epsilon: float = 1e-8) -> None:
        self.stats = RunningMeanStd(shape=(), var_epsilon=var_epsilon)

    def update(self, returns: Tensor | np.ndarray) -> None:
        self.stats.update(_to_numpy(returns).reshape(-1))

    def normalize(self, returns: ArrayLike) -> ArrayLike:
        # No clipping: clipping regression targets would bias the value function.
        return self.stats.normalize(returns, clip=None)

    def denormalize(self, values: ArrayLike) -> ArrayLike:
        mean, std = float(self.stats.mean), float(self.stats.std)
        return values * std + mean

    def state_dict(self) -> dict[str, Any]:
        return self.stats.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state)
