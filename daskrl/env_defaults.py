"""Defaults per env family: the settings a family needs to learn, used where the user left an option at its default.

The global defaults are tuned for cheap discrete envs (CartPole solves in seconds). Continuous control is another
regime: a few thousand steps per second, dense rewards that need normalizing, on-policy updates that need many
passes over little data. As Sample Factory's per-env overrides do, a family sets what differs; an option the user
gave (on the command line, in a config file, or by assigning it) always wins, and ``--no-env-defaults`` keeps the
global ones. The run prints the family's settings at start. Each family's numbers are measured in
docs/performance.md (``benchmarks/bench_learning.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from daskrl.config import SECTIONS, Config, flag


@dataclass(frozen=True)
class EnvFamily:
    name: str
    pattern: str  # a regular expression the env id must match in full (a "module:" prefix is ignored)
    options: dict[str, Any]


FAMILIES: tuple[EnvFamily, ...] = (
    # measured with bench_learning.py (1M steps): with a narrow initial policy (log std -2), ReLU and gamma 0.98 /
    # GAE 0.92 (rl-zoo's choices for HalfCheetah) HalfCheetah-v5 evaluated at 6,451 (rl-zoo: 5,819 on v3); the first
    # guess (log std 0, tanh, 0.99 / 0.95) reached 3,338
    EnvFamily("MuJoCo", r"(HalfCheetah|Hopper|Walker2d|Ant|Humanoid|HumanoidStandup|Swimmer|Reacher|Pusher|"
                        r"InvertedPendulum|InvertedDoublePendulum)-v\d+", {
                            "num_workers": 1, "num_envs_per_worker": 16, "rollout": 64, "slots_per_split": 2,
                            "hidden_sizes": [256, 256], "activation": "relu", "init_log_std": -2.0,
                            "learning_rate": 3e-4, "lr_schedule": "linear", "batch_size": 256,
                            "num_batches_per_epoch": 4, "num_epochs": 10, "gamma": 0.98, "advantage": "gae",
                            "gae_lambda": 0.92, "clip_ratio": 0.2, "max_grad_norm": 0.5, "value_clip": 0.0,
                            "max_policy_lag": 100}),
    # measured with bench_learning.py (100k steps, seeds 0-5): --sync and gamma 0.95 made Pendulum reproducible and
    # reach rl-zoo's -172 (evaluation median -165); asynchronous with gamma 0.9, the medians were -250 to -400
    EnvFamily("Pendulum", r"Pendulum-v\d+", {
        "num_workers": 1, "num_envs_per_worker": 16, "rollout": 64, "slots_per_split": 2, "gamma": 0.95,
        "learning_rate": 1e-3, "batch_size": 256, "num_batches_per_epoch": 4, "num_epochs": 10, "advantage": "gae",
        "sync": True}),
    EnvFamily("Box2D", r"(LunarLander|LunarLanderContinuous|BipedalWalker|BipedalWalkerHardcore)-v\d+", {
        "num_envs_per_worker": 16, "rollout": 64, "gamma": 0.999, "gae_lambda": 0.98, "entropy_coef": 0.01,
        "num_epochs": 4, "advantage": "gae", "learning_rate": 3e-4}),
)


def family_of(env: str) -> EnvFamily | None:
    """The family of an env id, or None (the global defaults apply)."""
    env_id = env.rsplit(":", 1)[-1]
    return next((f for f in FAMILIES if re.fullmatch(f.pattern, env_id)), None)


def _section_of(name: str) -> str:
    return next(s for s, cls in SECTIONS.items() if name in {f.name for f in cls.__dataclass_fields__.values()})


def apply_env_defaults(config: Config) -> dict[str, Any]:
    """Set the family's options that the user did not set; returns them (name -> value). Idempotent."""
    family = family_of(config.env.env) if config.run.env_defaults else None
    if family is None:
        return {}
    explicit = config.explicit()
    applied = {}
    for name, value in family.options.items():
        if name not in explicit:
            object.__setattr__(getattr(config, _section_of(name)), name, value)  # not counted as set by the user
            applied[name] = value
    return applied


def describe(config: Config) -> str:
    """One line naming the family's settings in force for this run ('' when none)."""
    applied = apply_env_defaults(config)
    if not applied:
        return ""
    family = family_of(config.env.env)
    shown = " ".join(f"{flag(k)} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in applied.items())
    return (f"defaults for {family.name} envs: {shown} (options you give win; --no-env-defaults keeps the global "
            "defaults)")
