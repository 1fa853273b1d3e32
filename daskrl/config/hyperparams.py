"""The hyperparameters a policy may change while it trains (population-based training mutates them).

Why apart from the config: the run's :class:`~daskrl.config.LearnerConfig` is shared by every policy and says
where each one starts; a policy's current values are its own (PBT gives each policy of the population other ones,
and a checkpoint keeps them), so the trainer reads these four from a dict of its own instead of the config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daskrl.config import LearnerConfig

#: the names, as the options that give their starting values
MUTABLE = ("learning_rate", "entropy_coef", "clip_ratio", "gamma")

# what each value may be (as config.py allows for the option): (low, high, low excluded)
_ALLOWED = {"learning_rate": (0.0, math.inf, True), "entropy_coef": (0.0, math.inf, False),
            "clip_ratio": (0.0, math.inf, True), "gamma": (0.0, 1.0, False)}


def from_config(cfg: LearnerConfig) -> dict[str, float]:
    """The starting values: the run's options."""
    return {name: float(getattr(cfg, name)) for name in MUTABLE}


def checked(values: Mapping[str, float]) -> dict[str, float]:
    """``values`` as floats, or ValueError naming every unknown name or value out of its range (nothing is set
    from a dict with one bad entry)."""
    problems, out = [], {}
    for name, value in values.items():
        if name not in _ALLOWED:
            problems.append(f"unknown hyperparameter {name!r} (mutable ones: {', '.join(MUTABLE)})")
            continue
        low, high, low_open = _ALLOWED[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < low or (low_open and value == low) or value > high:
            problems.append(f"{name} must be a finite number in {'(' if low_open else '['}{low:g}, {high:g}], "
                            f"got {value!r}")
            continue
        out[name] = float(value)
    if problems:
        raise ValueError("; ".join(problems))
    return out


def resumed(state: Mapping[str, Any], cfg: LearnerConfig) -> dict[str, float]:
    """The values to go on with from a trainer's state dict: the state's own (a policy's mutated values survive a
    resume), except where the option was changed since (``--resume --learning-rate 1e-4`` wins over the saved
    value, as it did before the values were mutable) or the state has none (a checkpoint from before them)."""
    now = from_config(cfg)
    saved = checked(state.get("hyperparams") or {})
    saved_config = state.get("hyperparams_config") or {}
    return {name: saved[name] if name in saved and saved_config.get(name, now[name]) == now[name] else now[name]
            for name in MUTABLE}
