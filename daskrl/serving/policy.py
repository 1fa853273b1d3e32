"""The served policy: a trained network that answers a batch of observations with actions, and the checks that turn
what a client sent (JSON or numpy) into that batch.

A request's observations are one observation (shaped as the env's) or a batch of them (one more leading dim); each
is checked against the policy's spaces here, so a wrong shape is refused in one line before it reaches a batch that
other clients share. The weights (and the version reported with every answer) change only through :meth:`load`,
which the batcher calls between two forward passes: a batch never mixes two versions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from daskrl.envs.layouts.dict_obs import pack_into, unpack
from daskrl.errors import RequestError, one_line
from daskrl.models.actor_critic import ActorCritic


class ServedPolicy:
    """A loaded :class:`ActorCritic` and the version of its weights; ``act`` runs one forward pass."""

    def __init__(self, model: ActorCritic, version: int, env: str, deterministic: bool = False) -> None:
        """``deterministic``: what a request that does not say gets (the most likely action, or a sampled one)."""
        self.model = model.eval()
        self.version = int(version)
        self.env = env
        self.deterministic = bool(deterministic)
        self.spaces = model.spaces
        self._dtype = np.dtype(self.spaces.obs_dtype)

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per observation row (0: a feed-forward policy keeps none)."""
        return self.model.state_size

    def load(self, version: int, weights: dict[str, np.ndarray]) -> None:
        """Take published weights (a live run's newer version); called between two batches only."""
        self.model.load_state_dict_numpy(weights)
        self.version = int(version)

    def act(self, obs: np.ndarray, deterministic: np.ndarray, states: np.ndarray | None) -> np.ndarray:
        """One forward pass: observations [N, *obs_shape], a bool per row (True: the most likely action), recurrent
        states [N, S] (updated in place; None for a feed-forward policy) -> actions [N, ...]."""
        with torch.inference_mode():
            actions, _, _ = self.model.act(obs, deterministic=deterministic, state=states)
        return np.array(actions)

    # ---- what a client sent -> the rows of a batch ----

    def observations(self, value: Any) -> tuple[np.ndarray, bool]:
        """``(rows [N, *obs_shape], single)`` from one observation or a batch of them; raises :class:`RequestError`
        with what this policy takes."""
        if self.spaces.is_dict:
            return self._dict_observations(value)
        try:
            obs = np.array(value, dtype=self._dtype)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise RequestError(f"observations must be numbers in a rectangular array ({one_line(exc, 120)}); "
                               f"this policy takes {self._takes()}") from None
        shape = tuple(self.spaces.obs_shape)
        if obs.shape == shape:
            return _finite(obs[None]), True
        if obs.shape[1:] == shape and len(obs) > 0:
            return _finite(obs), False
        raise RequestError(f"observations of shape {list(obs.shape)}: this policy takes {self._takes()}")

    def _takes(self) -> str:
        shape = list(self.spaces.obs_shape)
        return f"one observation of shape {shape} or a batch of shape {['n', *shape]} ({self.spaces.obs_dtype})"

    def _dict_observations(self, value: Any) -> tuple[np.ndarray, bool]:
        """Dict observations ({key: value}, or a list of them) packed into records, as the samplers store them."""
        keys = self.spaces.obs_keys
        single = isinstance(value, dict)
        items = [value] if single else value
        if not isinstance(items, (list, tuple)) or not items or not all(isinstance(o, dict) for o in items):
            raise RequestError(f"observations must be one Dict observation or a list of them: {self._dict_takes()}")
        size = self.spaces.obs_shape[0]
        rows = np.zeros((len(items), size), np.uint8)
        for row, item in zip(rows, items, strict=True):
            try:
                pack_into(row, item, keys)
            except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
                raise RequestError(f"a Dict observation that does not fit ({one_line(exc, 120)}): "
                                   f"{self._dict_takes()}") from None
        for name, values in unpack(rows, keys).items():
            _finite(values, name)
        return rows, single

    def _dict_takes(self) -> str:
        return "this policy takes " + ", ".join(f"{k.name!r} of shape {list(k.shape)} ({np.dtype(k.dtype).name})"
                                                for k in self.spaces.obs_keys)

    def resets(self, value: Any, rows: int) -> np.ndarray:
        """``reset`` (one bool for all rows, or one per row) -> a bool per row."""
        if isinstance(value, bool):
            return np.full(rows, value)
        if isinstance(value, (list, tuple, np.ndarray)) and len(value) == rows \
                and all(isinstance(v, (bool, np.bool_)) for v in value):
            return np.asarray(value, dtype=bool)
        raise RequestError(f"reset must be true, false or a list of {rows} of them (one per observation)")

    # ---- what a client may ask first ----

    def info(self) -> dict[str, Any]:
        """The spaces and the version, as ``GET /`` shows them."""
        s = self.spaces
        action: dict[str, Any] = {"kind": s.action_kind, "shape": list(s.action_shape), "dtype": s.action_dtype}
        if s.num_actions is not None:
            action["num_actions"] = s.num_actions
        if s.nvec is not None:
            action["nvec"] = list(s.nvec)
        if s.low is not None:
            action["low"], action["high"] = list(s.low), list(s.high or [])
        observation: dict[str, Any] = {"shape": list(s.obs_shape), "dtype": s.obs_dtype}
        if s.is_dict:
            observation = {"keys": {k.name: {"shape": list(k.shape), "dtype": np.dtype(k.dtype).name}
                                    for k in s.obs_keys}}
        return {"env": self.env, "observation": observation, "action": action, "recurrent": self.state_size > 0,
                "deterministic_default": self.deterministic, "policy_version": self.version}


def _finite(rows: np.ndarray, key: str | None = None) -> np.ndarray:
    """``rows`` when every number in them is finite; else a :class:`RequestError` naming the first rows that are
    not. A policy acts on NaN as on any number (a net's output is then NaN too, and its action arbitrary), so a
    client that sent one is told instead of answered."""
    if rows.dtype.kind != "f" or np.isfinite(rows).all():
        return rows
    bad = np.flatnonzero(~np.isfinite(rows.reshape(len(rows), -1)).all(axis=1))
    where = f"row{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad[:5]))}" + (f", key {key!r}" if key else "")
    raise RequestError(f"observations hold NaN or infinity ({where}): a policy acts on finite numbers only")
