"""Dict observations as packed byte records: one row of a slot's ``obs`` array holds every key of one step.

Each kept key is a typed field of the record (images as uint8, everything else as float32, at a 4-byte aligned
offset), so the record is what a numpy structured array per key would hold, in one array. Every path that moves
observations (slot writes, the carry between slots, time-limit final observations, the batcher's copies, a
remote slot read in one RPC, the learner's minibatches) moves that one array unchanged; only the env side (which
packs, :class:`PackedDictObservations`) and the model side (which unpacks into one tensor per key,
:func:`unpack_tensors`) know the keys.

Keys whose space has no fixed shape (Text, Graph, Sequence, nested Dicts deeper than one level) are dropped, and
the run says so once at start; naming one in ``--obs-keys`` is an error instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.errors import EnvError

#: how a key is encoded by the model: pixels (a CNN), a float vector (an MLP), indices (one-hot)
KEY_KINDS = ("image", "box", "discrete", "multi_discrete", "multi_binary")
_ALIGN = 4  # float32 fields start at multiples of 4 bytes, so they can be viewed without a copy


@dataclass(frozen=True)
class ObsKey:
    """One field of a packed observation record (the key's own shape; the batch dims are never included)."""

    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: str  # what the record stores: "uint8" for images, "float32" otherwise
    offset: int  # bytes from the start of the record
    nvec: tuple[int, ...] = ()  # categories per component: (n,) for discrete, the nvec of multi_discrete

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # not np.prod: 5 us against 0.1, for every key of every observation packed

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def feature_dim(self) -> int:
        """Width of the key's input to an MLP: one-hot width for index keys, the flat size otherwise."""
        return int(sum(self.nvec)) if self.kind in ("discrete", "multi_discrete") else self.size

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "shape": list(self.shape), "dtype": self.dtype,
                "offset": self.offset, "nvec": list(self.nvec)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ObsKey:
        return cls(str(d["name"]), str(d["kind"]), tuple(int(x) for x in d["shape"]), str(d["dtype"]),
                   int(d["offset"]), tuple(int(x) for x in d.get("nvec", ())))


def _key_kind(space: gym.Space) -> tuple[str, tuple[int, ...], tuple[int, ...]] | None:
    """(kind, shape, nvec) of a storable sub-space, None for one without a fixed shape."""
    if isinstance(space, gym.spaces.Box):
        shape = tuple(int(x) for x in space.shape)
        if len(shape) == 3 and np.dtype(space.dtype) == np.uint8:
            return "image", shape, ()
        return "box", shape, ()
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            return None
        return "discrete", (), (int(space.n),)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1 or np.any(space.start != 0):
            return None
        return "multi_discrete", (len(space.nvec),), tuple(int(n) for n in space.nvec)
    if isinstance(space, gym.spaces.MultiBinary):
        return "multi_binary", tuple(int(x) for x in np.atleast_1d(space.shape)), ()
    return None


def _flatten_one_level(space: gym.spaces.Dict) -> dict[str, gym.Space]:
    """Top-level keys, and the keys of a nested Dict as ``outer/inner`` (one level of nesting is enough)."""
    out: dict[str, gym.Space] = {}
    for name, sub in space.spaces.items():
        if isinstance(sub, gym.spaces.Dict):
            for inner, leaf in sub.spaces.items():
                out[f"{name}/{inner}"] = leaf
        else:
            out[str(name)] = sub
    return out


def read_dict_space(space: gym.spaces.Dict, wanted: Sequence[str] = ()) -> tuple[tuple[ObsKey, ...], tuple[str, ...]]:
    """The record layout of a Dict space -> (kept keys, dropped key names). ``wanted`` (``--obs-keys``) keeps only
    those keys, in that order, and refuses one that is missing or cannot be stored."""
    leaves = _flatten_one_level(space)
    if wanted:
        missing = [k for k in wanted if k not in leaves]
        if missing:
            raise EnvError(f"--obs-keys names {missing}, which this env's observations lack; its keys are "
                           f"{sorted(leaves)}")
        unstorable = [k for k in wanted if _key_kind(leaves[k]) is None]
        if unstorable:
            raise EnvError(f"--obs-keys names {unstorable}, whose spaces ("
                           f"{', '.join(type(leaves[k]).__name__ for k in unstorable)}) have no fixed shape and "
                           "cannot be stored in trajectory slots; leave them out or wrap the env to encode them")
        names = list(wanted)
    else:
        names = sorted(leaves)  # gymnasium sorts Dict keys too: the record order does not depend on the env's
    keys: list[ObsKey] = []
    dropped: list[str] = []
    offset = 0
    for name in names:
        kind = _key_kind(leaves[name])
        if kind is None:
            dropped.append(name)
            continue
        key_kind, shape, nvec = kind
        key = ObsKey(name, key_kind, shape, "uint8" if key_kind == "image" else "float32", offset, nvec)
        keys.append(key)
        offset += -(-key.nbytes // _ALIGN) * _ALIGN
    if not keys:
        raise EnvError(f"none of the observation keys {sorted(leaves)} can be stored (no fixed shape); wrap the "
                       "env to give it at least one Box, Discrete, MultiDiscrete or MultiBinary key")
    return tuple(keys), tuple(dropped)


def record_size(keys: Sequence[ObsKey]) -> int:
    """Bytes per record (a multiple of 4)."""
    last = max(keys, key=lambda k: k.offset)
    return last.offset + -(-last.nbytes // _ALIGN) * _ALIGN


def _leaf(obs: Mapping[str, Any], name: str) -> Any:
    if name in obs:
        return obs[name]
    outer, _, inner = name.partition("/")
    return obs[outer][inner]


def pack_into(row: np.ndarray, obs: Mapping[str, Any], keys: Sequence[ObsKey]) -> np.ndarray:
    """Write one dict observation into ``row`` (uint8, the record's size) and return it."""
    for key in keys:
        field = row[key.offset:key.offset + key.nbytes].view(key.dtype)
        field[...] = np.asarray(_leaf(obs, key.name), dtype=key.dtype).reshape(-1)
    return row


def pack_rows(obs: Mapping[str, Any], keys: Sequence[ObsKey], count: int) -> np.ndarray:
    """``count`` dict observations given key by key ({key: [count, *shape]}, a dataset's columns) as records
    [count, record_size] uint8: :func:`unpack`'s inverse."""
    rows = np.zeros((count, record_size(keys)), np.uint8)
    for key in keys:
        field = rows[:, key.offset:key.offset + key.nbytes].view(key.dtype)
        field[...] = np.asarray(_leaf(obs, key.name), dtype=key.dtype).reshape(count, -1)
    return rows


def unpack(rows: np.ndarray, keys: Sequence[ObsKey]) -> dict[str, np.ndarray]:
    """Records [..., record_size] uint8 -> {key: array [..., *shape]} (views where numpy allows, for reading)."""
    lead = rows.shape[:-1]
    out = {}
    for key in keys:
        field = np.ascontiguousarray(rows[..., key.offset:key.offset + key.nbytes]).view(key.dtype)
        out[key.name] = field.reshape(*lead, *key.shape)
    return out


class PackedDictObservations(gym.ObservationWrapper):
    """Gives daskrl's samplers an env whose observations are packed records (see the module docstring)."""

    def __init__(self, env: gym.Env, keys: Sequence[ObsKey]) -> None:
        super().__init__(env)
        self.keys = tuple(keys)
        size = record_size(self.keys)
        self.observation_space = gym.spaces.Box(0, 255, (size,), np.uint8)
        self._row = np.zeros(size, np.uint8)
        #: each key's field of the row, viewed once in the key's dtype and shape: a step only assigns into them
        self._fields = tuple((key.name, self._row[key.offset:key.offset + key.nbytes].view(key.dtype).reshape(key.shape))
                             for key in self.keys)

    def observation(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The packed record, in one buffer reused every step (no allocation per step): read it before the next
        step, as the env group does when it copies it into the slot (a kept final observation is copied too)."""
        for name, field in self._fields:
            field[...] = _leaf(observation, name)
        return self._row
