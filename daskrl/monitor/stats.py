"""Run statistics gathered by the runner from every component's ``stats()``."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class EpisodeWindow:
    """Returns and lengths of the last ``size`` finished episodes (the usual "mean of the last 100")."""

    size: int = 100
    returns: deque = field(default_factory=lambda: deque(maxlen=100))
    lengths: deque = field(default_factory=lambda: deque(maxlen=100))
    total: int = 0

    def __post_init__(self) -> None:
        self.returns = deque(maxlen=self.size)
        self.lengths = deque(maxlen=self.size)

    def extend(self, episodes: list) -> None:
        """``episodes``: (return, length, ...) records; what follows the length (the policy that played) is not
        this window's business. Only the newest ``size`` can stay in the window, so only they are read: a cheap env
        ends thousands of episodes a second, and the driver shares the machine's cores with the samplers."""
        recent = episodes[-self.size:] if len(episodes) > self.size else episodes
        self.returns.extend(float(episode[0]) for episode in recent)
        self.lengths.extend(int(episode[1]) for episode in recent)
        self.total += len(episodes)

    @property
    def full(self) -> bool:
        """As many episodes as the window holds have finished: only then does its mean judge the policy."""
        return len(self.returns) >= self.size

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else math.nan

    @property
    def std_return(self) -> float:
        return float(np.std(self.returns)) if self.returns else math.nan

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths)) if self.lengths else math.nan


class FrameRate:
    """Frames per second over a sliding window of (time, frames) samples."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.samples: deque = deque()

    def add(self, frames: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.samples.append((now, frames))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window_s:
            self.samples.popleft()
        return self.rate

    @property
    def rate(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, f0), (t1, f1) = self.samples[0], self.samples[-1]
        return (f1 - f0) / (t1 - t0) if t1 > t0 else 0.0


def as_number(value: Any, default: float = math.nan) -> float:
    """A float from a metric value; ``default`` for what is missing, NaN or not a number (JSON null, text)."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(out) else out


def time_shares(stats: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per component, the share of wall time per activity (waiting, env, inference, train, ...)."""
    return {s["name"]: {k: round(v, 4) for k, v in s.get("timing", {}).get("share", {}).items()}
            for s in stats if "timing" in s}
