"""A plain, serializable description of an env's observation and action spaces.

Workers, the learner and the scheduler all need to agree on shapes and dtypes
without building an env or shipping gymnasium objects around, so the spaces are
reduced once (at probe time) to this msgpack-friendly record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.envs.layouts.composite_actions import ActionLayout, read_composite
from daskrl.envs.layouts.dict_obs import ObsKey, read_dict_space, record_size
from daskrl.errors import EnvError

#: "composite": a Tuple or Dict of the other kinds, stored as one flat float32 row (daskrl/envs/layouts/composite_actions.py)
ACTION_KINDS = ("discrete", "multi_discrete", "box", "composite")


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
    # Dict observations: the kept keys, packed into one uint8 record per step (obs_shape is the record's size; see
    # daskrl/envs/layouts/dict_obs.py), the keys that were dropped, and the key that masks invalid discrete actions
    obs_keys: tuple[ObsKey, ...] = ()
    dropped_obs_keys: tuple[str, ...] = ()
    action_mask_key: str | None = None
    # multi-agent envs (daskrl/envs/multi_agent.py): every agent shares the spaces above; a rollout worker steps one
    # column per (env, agent), so its slots are num_agents times as wide as its env count
    num_agents: int = 1
    agent_ids: tuple[str, ...] = ()
    # agents whose spaces differ (daskrl/envs/layouts/agent_spaces.py): the spaces above are the slot layout (the union) and
    # these each agent's own, in agent_ids order; empty when every agent has the spaces above
    agent_spaces: tuple[EnvSpaces, ...] = ()
    # composite (Tuple or Dict) actions: their parts and where each sits in the flat row (action_shape is (width,))
    action_layout: ActionLayout | None = None

    def __post_init__(self) -> None:
        if self.action_kind not in ACTION_KINDS:
            raise EnvError(f"action_kind must be one of {ACTION_KINDS}, got {self.action_kind!r}")
        if (self.action_kind == "composite") != (self.action_layout is not None):
            raise EnvError("composite actions, and only they, have an action_layout")

    @property
    def is_image(self) -> bool:
        """Image observations (HWC uint8) get a CNN encoder and uint8 buffers."""
        return len(self.obs_shape) == 3 and self.obs_dtype == "uint8"

    @property
    def is_dict(self) -> bool:
        """Dict observations, stored as packed records and encoded key by key."""
        return bool(self.obs_keys)

    def key(self, name: str) -> ObsKey:
        return next(k for k in self.obs_keys if k.name == name)

    @property
    def feature_keys(self) -> tuple[ObsKey, ...]:
        """The keys the model encodes (all but the action mask)."""
        return tuple(k for k in self.obs_keys if k.name != self.action_mask_key)

    def spaces_of(self, agent: str) -> EnvSpaces:
        """Agent ``agent``'s own spaces (the run's, unless its agents' spaces differ)."""
        if not self.agent_spaces:
            return self
        return self.agent_spaces[self.agent_ids.index(agent)]

    def cut_for(self, policy: EnvSpaces) -> tuple[int, int] | None:
        """``(obs_len, act_dim)``: how much of this (slot) layout's observation and Box action rows ``policy``'s
        spaces use (act_dim 0: Discrete, in range by construction); None when they are the same (nothing to slice)."""
        if policy.obs_shape == self.obs_shape and policy.action_shape == self.action_shape:
            return None
        return policy.obs_dim, policy.action_dim if policy.action_kind == "box" else 0

    @property
    def obs_dim(self) -> int:
        """Flat observation size, what an MLP encoder consumes."""
        return int(np.prod(self.obs_shape, dtype=np.int64))

    @property
    def action_dim(self) -> int:
        """Number of scalars per action (1 for discrete)."""
        return int(np.prod(self.action_shape, dtype=np.int64)) if self.action_shape else 1

    def box_is_bounded(self) -> bool:
        """A Box action space with a finite low and high in every dimension (a Gaussian can be squashed into it)."""
        return self.low is not None and self.high is not None and all(
            math.isfinite(x) for x in [*self.low, *self.high])

    @classmethod
    def from_env(cls, env: gym.Env, obs_keys: Sequence[str] = (), action_mask_key: str = "") -> EnvSpaces:
        return cls.from_spaces(env.observation_space, env.action_space, obs_keys, action_mask_key)

    @classmethod
    def from_spaces(cls, observation_space: gym.Space, action_space: gym.Space, obs_keys: Sequence[str] = (),
                    action_mask_key: str = "") -> EnvSpaces:
        """``obs_keys`` and ``action_mask_key`` (``--obs-keys``, ``--action-mask-key``) apply to Dict observations:
        which keys to keep, and which one masks actions ('' = ``action_mask`` where there is one)."""
        actions = _read_action_space(action_space)
        if not isinstance(observation_space, gym.spaces.Dict):
            if obs_keys or action_mask_key:
                raise EnvError(f"--obs-keys and --action-mask-key apply to Dict observations; this env's are "
                               f"{type(observation_space).__name__}")
            obs_shape, obs_dtype = _read_obs_space(observation_space)
            return cls(obs_shape=obs_shape, obs_dtype=obs_dtype, **actions)
        keys, dropped = read_dict_space(observation_space, obs_keys)
        mask = _read_action_mask(keys, action_mask_key, actions)
        return cls(obs_shape=(record_size(keys),), obs_dtype="uint8", obs_keys=keys, dropped_obs_keys=dropped,
                   action_mask_key=mask, **actions)

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
            "obs_keys": [k.to_dict() for k in self.obs_keys],
            "dropped_obs_keys": list(self.dropped_obs_keys),
            "action_mask_key": self.action_mask_key,
            "num_agents": self.num_agents,
            "agent_ids": list(self.agent_ids),
            "agent_spaces": [a.to_dict() for a in self.agent_spaces],
            "action_layout": None if self.action_layout is None else self.action_layout.to_dict(),
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
            obs_keys=tuple(ObsKey.from_dict(k) for k in d.get("obs_keys") or ()),
            dropped_obs_keys=tuple(str(k) for k in d.get("dropped_obs_keys") or ()),
            action_mask_key=d.get("action_mask_key"),
            num_agents=int(d.get("num_agents", 1)),
            agent_ids=tuple(str(a) for a in d.get("agent_ids") or ()),
            agent_spaces=tuple(EnvSpaces.from_dict(a) for a in d.get("agent_spaces") or ()),
            action_layout=None if d.get("action_layout") is None else ActionLayout.from_dict(d["action_layout"]),
        )


def spaces_differ(spaces: EnvSpaces, obs_shape: tuple[int, ...], action_space: Any) -> tuple[str, str] | None:
    """Where a batched backend's spaces (``obs_shape``, its ``action_space``) are not the run's (the gymnasium env's,
    which the policy was built for): its observation shape and action count, then the run's, each as a phrase for
    the backend's one-line refusal; None where they agree."""
    discrete = hasattr(action_space, "n")
    actions = int(action_space.n) if discrete else int(np.prod(action_space.shape))
    expected = spaces.num_actions if discrete else spaces.action_dim
    if tuple(spaces.obs_shape) == tuple(obs_shape) and actions == expected:
        return None
    return f"{tuple(obs_shape)} with {actions} actions", f"{tuple(spaces.obs_shape)} with {expected}"


def _unsupported(role: str, space: gym.Space, hint: str) -> EnvError:
    return EnvError(f"Unsupported {role} space {space!r} ({type(space).__name__}): {hint}")


def _read_obs_space(space: gym.Space) -> tuple[tuple[int, ...], str]:
    # Box and MultiBinary are fixed-shape arrays; make_env turns a single-agent env's Discrete, MultiDiscrete and
    # Tuple observations into Dicts (daskrl/envs/layouts/index_obs.py); Text, Graph and Sequence have no fixed shape
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return tuple(int(x) for x in space.shape), np.dtype(space.dtype).name
    raise _unsupported(
        "observation",
        space,
        "daskrl takes Box, MultiBinary and Dict observations, and Discrete, MultiDiscrete and Tuple ones of "
        "single-agent envs (made a Dict where the env is built); wrap the env to encode its observations as one "
        "of those (e.g. in a 'module:factory' function).",
    )


def _read_action_mask(keys: Sequence[ObsKey], name: str, actions: dict[str, Any]) -> str | None:
    """The key that masks actions: ``name`` if given (it must be there), else ``action_mask`` where present. Its
    width must match the discrete actions' (the sum of nvec for MultiDiscrete)."""
    chosen = name or ("action_mask" if any(k.name == "action_mask" for k in keys) else "")
    if not chosen:
        return None
    key = next((k for k in keys if k.name == chosen), None)
    if key is None:
        raise EnvError(f"--action-mask-key {chosen!r}: the observations have no such key (they have "
                       f"{[k.name for k in keys]})")
    layout = actions.get("action_layout")
    if actions["action_kind"] == "box" or (layout is not None and not layout.num_logits):
        what = "continuous (Box)" if layout is None else f"a {layout.structure.title()} of Box parts only"
        raise EnvError(f"observation key {chosen!r} masks actions, but this env's actions are {what}; masks apply "
                       "to Discrete and MultiDiscrete actions (and those parts of Tuple or Dict actions)")
    width = actions["num_actions"] if actions["action_kind"] == "discrete" else \
        layout.num_logits if layout is not None else sum(actions["nvec"])
    if key.kind not in ("box", "multi_binary") or key.size != width:
        raise EnvError(f"action mask {chosen!r} must be a MultiBinary or Box of {width} values (one per action), "
                       f"got {key.kind} of shape {key.shape}")
    return chosen


def _read_action_space(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        layout = read_composite(space, _read_action_space)
        return {"action_kind": "composite", "action_shape": (layout.width,), "action_dtype": "float32",
                "action_layout": layout}
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
        "supported action spaces are Discrete, MultiDiscrete, MultiBinary and Box, and a Tuple or Dict of them; "
        "wrap the env to expose one of them.",
    )
