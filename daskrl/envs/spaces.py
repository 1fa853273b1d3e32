"""A plain, serializable description of an env's observation and action spaces.

Workers, the learner and the scheduler all need to agree on shapes and dtypes
without building an env or shipping gymnasium objects around, so the spaces are
reduced once (at probe time) to this msgpack-friendly record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.errors import EnvError

ACTION_KINDS = ("discrete", "multi_discrete", "box")


@dataclass(frozen=True)
class EnvSpaces:
    """Shapes/dtypes of one env's observations and actions (the batch dim is never included)."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    action_kind: str
    action_shape: tuple[int, ...]
    action_dtype: str
    num_actions: int | None = None
    nvec: list[int] | None = None
    low: list[float] | None = None
    high: list[float] | None = None

    def __post_init__(self) -> None:
        if self.action_kind not in ACTION_KINDS:
            raise EnvError(f"action_kind must be one of {ACTION_KINDS}, got {self.action_kind!r}")

    @property
    def is_image(self) -> bool:
        """Image observations (HWC uint8) get a CNN encoder and uint8 buffers."""
        return len(self.obs_shape) == 3 and self.obs_dtype == "uint8"

    @property
    def obs_dim(self) -> int:
        """Flat observation size, what an MLP encoder consumes."""
        return int(np.prod(self.obs_shape, dtype=np.int64))

    @property
    def action_dim(self) -> int:
        """Number of scalars per action (1 for discrete)."""
        return int(np.prod(self.action_shape, dtype=np.int64)) if self.action_shape else 1

    @classmethod
    def from_env(cls, env: gym.Env) -> EnvSpaces:
        return cls.from_spaces(env.observation_space, env.action_space)

    @classmethod
    def from_spaces(cls, observation_space: gym.Space, action_space: gym.Space) -> EnvSpaces:
        obs_shape, obs_dtype = _read_obs_space(observation_space)
        return cls(obs_shape=obs_shape, obs_dtype=obs_dtype, **_read_action_space(action_space))

    def to_dict(self) -> dict[str, Any]:
        """Only str/int/float/list/None values, so msgpack and JSON can carry it unchanged."""
        return {
            "obs_shape": list(self.obs_shape),
            "obs_dtype": self.obs_dtype,
            "action_kind": self.action_kind,
            "action_shape": list(self.action_shape),
            "action_dtype": self.action_dtype,
            "num_actions": self.num_actions,
            "nvec": None if self.nvec is None else list(self.nvec),
            "low": None if self.low is None else list(self.low),
            "high": None if self.high is None else list(self.high),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvSpaces:
        return cls(
            obs_shape=tuple(int(x) for x in d["obs_shape"]),
            obs_dtype=str(d["obs_dtype"]),
            action_kind=str(d["action_kind"]),
            action_shape=tuple(int(x) for x in d["action_shape"]),
            action_dtype=str(d["action_dtype"]),
            num_actions=None if d.get("num_actions") is None else int(d["num_actions"]),
            nvec=None if d.get("nvec") is None else [int(x) for x in d["nvec"]],
            low=None if d.get("low") is None else [float(x) for x in d["low"]],
            high=None if d.get("high") is None else [float(x) for x in d["high"]],
        )


def _unsupported(role: str, space: gym.Space, hint: str) -> EnvError:
    return EnvError(f"Unsupported {role} space {space!r} ({type(space).__name__}): {hint}")


def _read_obs_space(space: gym.Space) -> tuple[tuple[int, ...], str]:
    # Box and MultiBinary are fixed-shape arrays; everything else must be flattened first.
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return tuple(int(x) for x in space.shape), np.dtype(space.dtype).name
    raise _unsupported(
        "observation",
        space,
        "daskrl needs fixed-shape array observations; wrap the env with "
        "gymnasium.wrappers.FlattenObservation (e.g. in a 'module:factory' function).",
    )


def _read_action_space(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise _unsupported("action", space, "Discrete actions must start at 0; wrap the action space.")
        return {
            "action_kind": "discrete",
            "action_shape": (),
            "action_dtype": "int64",
            "num_actions": int(space.n),
        }
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1 or np.any(space.start != 0):
            raise _unsupported(
                "action", space, "only 1-D MultiDiscrete spaces starting at 0 are supported; wrap the env."
            )
        return {
            "action_kind": "multi_discrete",
            "action_shape": (len(space.nvec),),
            "action_dtype": "int64",
            "nvec": [int(x) for x in space.nvec],
        }
    if isinstance(space, gym.spaces.MultiBinary):
        if len(space.shape) != 1:
            raise _unsupported("action", space, "only 1-D MultiBinary action spaces are supported.")
        n = int(space.shape[0])
        return {
            "action_kind": "multi_discrete",
            "action_shape": (n,),
            "action_dtype": "int64",
            "nvec": [2] * n,
        }
    if isinstance(space, gym.spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            raise _unsupported("action", space, "Box actions must be floating point.")
        return {
            "action_kind": "box",
            "action_shape": tuple(int(x) for x in space.shape),
            "action_dtype": np.dtype(space.dtype).name,
            "low": [float(x) for x in space.low.ravel()],
            "high": [float(x) for x in space.high.ravel()],
        }
    raise _unsupported(
        "action",
        space,
        "supported action spaces are Discrete, MultiDiscrete, MultiBinary and Box; "
        "wrap the env to expose one of them (composite spaces can be flattened).",
    )
