"""Tuple and Dict action spaces (hybrid discrete + continuous control) stored as one flat float32 row per step.

Every path that moves actions (the slots, remote inference answers, the batcher, the learner's minibatches) moves
one fixed-width array, as it does for a Box; only the env side, which turns a row into the env's Tuple or Dict where
the env is stepped (:meth:`ActionLayout.to_env`), and the action head, one head per part, know the parts. A part
takes the columns ``offset:offset + width`` of the row: a Discrete part one column holding its index, a MultiDiscrete
(or MultiBinary) part one per component, a Box part its flattened values. float32 holds every integer up to 2**24
exactly, so a discrete index survives the row unchanged (larger ones are refused when the space is read).

The existing kinds keep their own paths: an env with a plain Discrete, MultiDiscrete or Box space never meets this
module, so it costs them nothing per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.errors import EnvError

#: what a part of a composite action may be (MultiBinary is read as a MultiDiscrete of 2s)
PART_SPACES = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box)
#: float32 stores integers exactly up to here
_EXACT = 2**24


@dataclass(frozen=True)
class ActionPart:
    """One part of a composite action: its name (the Dict key, or the Tuple position), the fields an ``EnvSpaces``
    gives a plain action space of its kind (so a head is built from either alike), and its columns in the row."""

    name: str
    action_kind: str  # "discrete", "multi_discrete" or "box"
    action_shape: tuple[int, ...]
    action_dtype: str  # what the env takes (int64 for Discrete, int8 for MultiBinary, the Box's float dtype)
    offset: int  # the part's first column in the flat row
    num_actions: int | None = None
    nvec: list[int] | None = None
    low: list[float] | None = None
    high: list[float] | None = None

    @property
    def action_dim(self) -> int:
        """Scalars per action of this part, which is also its number of columns (1 for Discrete)."""
        return int(np.prod(self.action_shape, dtype=np.int64)) if self.action_shape else 1

    @property
    def num_logits(self) -> int:
        """Logits of a discrete part (what an action mask masks), 0 for a Box."""
        if self.action_kind == "discrete":
            return int(self.num_actions or 0)
        return int(sum(self.nvec or ())) if self.action_kind == "multi_discrete" else 0

    def converter(self) -> Callable[[np.ndarray], Any]:
        """``row -> this part's action`` as the env takes it (a copy: the row is shared memory that is rewritten)."""
        a, b, dtype, shape = self.offset, self.offset + self.action_dim, np.dtype(self.action_dtype), self.action_shape
        if self.action_kind == "discrete":
            return lambda row: dtype.type(row[a])
        if self.action_kind == "multi_discrete":
            return lambda row: row[a:b].astype(dtype)
        low = np.asarray(self.low, dtype).reshape(shape)
        high = np.asarray(self.high, dtype).reshape(shape)
        return lambda row: np.clip(row[a:b].reshape(shape).astype(dtype), low, high)  # inside the Box, as a Box's

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "action_kind": self.action_kind, "action_shape": list(self.action_shape),
                "action_dtype": self.action_dtype, "offset": self.offset, "num_actions": self.num_actions,
                "nvec": self.nvec, "low": self.low, "high": self.high}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ActionPart:
        return cls(name=str(d["name"]), action_kind=str(d["action_kind"]),
                   action_shape=tuple(int(x) for x in d["action_shape"]), action_dtype=str(d["action_dtype"]),
                   offset=int(d["offset"]), num_actions=None if d.get("num_actions") is None else int(d["num_actions"]),
                   nvec=None if d.get("nvec") is None else [int(x) for x in d["nvec"]],
                   low=None if d.get("low") is None else [float(x) for x in d["low"]],
                   high=None if d.get("high") is None else [float(x) for x in d["high"]])


@dataclass(frozen=True)
class ActionLayout:
    """How a Tuple or Dict action maps onto a flat row: ``structure`` ("tuple" or "dict") and the parts in order."""

    structure: str
    parts: tuple[ActionPart, ...]
    _converters: tuple[Callable[[np.ndarray], Any], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_converters", tuple(p.converter() for p in self.parts))

    def __reduce__(self) -> tuple:
        return type(self), (self.structure, self.parts)  # the converters are closures: rebuilt, not pickled

    @property
    def width(self) -> int:
        """Columns of the flat row."""
        return sum(p.action_dim for p in self.parts)

    @property
    def num_logits(self) -> int:
        """Logits of all discrete parts, in part order: the width an action mask must have."""
        return sum(p.num_logits for p in self.parts)

    def to_env(self, row: np.ndarray) -> tuple | dict:
        """One flat row -> the action the env's Tuple or Dict space contains."""
        if self.structure == "tuple":
            return tuple(convert(row) for convert in self._converters)
        return {p.name: convert(row) for p, convert in zip(self.parts, self._converters, strict=True)}

    def to_row(self, action: tuple | list | Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
        """The env's action -> its flat float32 row (into ``out`` if given): the inverse of :meth:`to_env`."""
        row = np.empty(self.width, np.float32) if out is None else out
        for k, part in enumerate(self.parts):
            value = action[part.name] if self.structure == "dict" else action[k]
            row[part.offset:part.offset + part.action_dim] = np.asarray(value, np.float32).reshape(-1)
        return row

    def to_dict(self) -> dict[str, Any]:
        return {"structure": self.structure, "parts": [p.to_dict() for p in self.parts]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ActionLayout:
        return cls(str(d["structure"]), tuple(ActionPart.from_dict(p) for p in d["parts"]))


def read_composite(space: gym.spaces.Tuple | gym.spaces.Dict,
                   read_part: Callable[[gym.Space], dict[str, Any]]) -> ActionLayout:
    """The layout of a Tuple or Dict action space; ``read_part`` reads one part as a plain action space (the reader
    of daskrl/envs/layouts/spaces.py, passed in so that module stays the one that knows plain spaces). A nested Tuple or
    Dict, a space of another kind or a discrete part too large for float32 is one :class:`EnvError` naming the
    part."""
    kind = type(space).__name__
    named = list(space.spaces.items()) if isinstance(space, gym.spaces.Dict) else list(enumerate(space.spaces))
    if not named:
        raise EnvError(f"the action space {space!r} has no parts; give it at least one Discrete, MultiDiscrete, "
                       "MultiBinary or Box part")
    parts, offset = [], 0
    for name, sub in named:
        where = f"part {name!r} of the Dict action space" if kind == "Dict" else f"part {name} of the Tuple action space"
        if isinstance(sub, (gym.spaces.Tuple, gym.spaces.Dict)):
            raise EnvError(f"{where} is itself a {type(sub).__name__}: nested composite actions are not supported; "
                           "flatten them into one level of Discrete, MultiDiscrete, MultiBinary and Box parts "
                           "(a gymnasium.ActionWrapper)")
        if not isinstance(sub, PART_SPACES):
            raise EnvError(f"{where} is a {type(sub).__name__} ({sub!r}); the parts of a Tuple or Dict action space "
                           "must be Discrete, MultiDiscrete, MultiBinary or Box")
        try:
            fields = read_part(sub)
        except EnvError as exc:
            raise EnvError(f"{where}: {exc}") from None
        part = ActionPart(name=str(name), offset=offset, **{**fields, "action_dtype": np.dtype(sub.dtype).name})
        if max(part.nvec or [part.num_actions or 0]) > _EXACT:
            raise EnvError(f"{where} has more than 2**24 choices, more than a float32 action row holds exactly")
        parts.append(part)
        offset += part.action_dim
    return ActionLayout("dict" if kind == "Dict" else "tuple", tuple(parts))
