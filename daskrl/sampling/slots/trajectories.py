"""Trajectory slots in shared memory: where rollout workers write and the learner reads.

A rollout worker owns ``num_splits * slots_per_split`` slots. A slot holds ``rollout`` steps of one split
(``B = num_envs / num_splits`` envs), time-major:

    obs         [slots, T + 1, B, *obs_shape]   (step T is the first obs of the next slot: for bootstrapping)
    actions     [slots, T, B, *action_shape]
    rewards, log_probs                           [slots, T, B] float32 (no values: the learner computes its own)
    terminated, truncated                        [slots, T, B] uint8 (episode ended after step t)
    policy_version                               [slots, T] int32 (the version that chose the actions at t)
    final_obs   [slots, B, *obs_shape]           the real final observations of episodes a time limit cut in the
    final_at    [slots, B] int32                 slot (``obs[t + 1]`` is already the next episode's first): at
                                                 ``t * B + b``, -1 where unused; room for one per env and slot

With several policies (``--num-policies``), or agents that may sit a step out (multi-agent envs), the slot says who
acted, per env column and step, and ``policy_version`` becomes per column too:

    policy_id   [slots, T + 1, B] int8           the policy that chose the action at t (-1: nobody; an agent that
                                                 finished before its env did, an untrained opponent, or a player
                                                 waiting for its turn): each policy's learner trains on its own
                                                 steps only. Step T, like ``obs[T]``, is who acts first in the
                                                 next slot: the learner needs it to tell whether ``obs[T]`` is a
                                                 turn-based player's own observation (daskrl/learning/turns.py)
    policy_version                               [slots, T, B] int32 (the version of that policy)

With a recurrent policy (``--rnn``; ``S`` floats of state per env) two more fields:

    rnn_states  [slots, B, S] float32            the state each env's step 0 of the slot was acted from (after the
                                                 reset of an episode that begins there): the learner starts there
    rnn_live    [slots, B, S] float32            the state to act from at the slot's current step: whoever acts
                                                 (the rollout worker inline, or any inference worker) reads it and
                                                 writes the next one; the rollout worker zeroes an env's row when
                                                 its episode ends. In the slot, so any inference worker can act for
                                                 any request, one that was recreated included

Messages carry only ``(worker, slot index)``; consumers attach the arrays once by their descriptions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import SharedMemoryError


@dataclass(frozen=True)
class SlotLayout:
    """Shapes and dtypes of one rollout worker's slot pool."""

    num_slots: int
    rollout: int
    envs_per_split: int
    obs_shape: tuple
    obs_dtype: str
    action_shape: tuple
    action_dtype: str
    rnn_state_size: int = 0  # floats of recurrent state per env (0: a feed-forward policy, no state fields)
    tagged: bool = False  # each column and step says which policy acted (several policies or multi-agent envs)

    @classmethod
    def for_worker(cls, spaces: EnvSpaces, num_envs: int, num_splits: int, rollout: int, slots_per_split: int,
                   rnn_state_size: int = 0, tagged: bool = False) -> SlotLayout:
        """``num_envs`` counts env columns: with a multi-agent env, one per agent of each env."""
        return cls(num_splits * slots_per_split, rollout, num_envs // num_splits, tuple(spaces.obs_shape),
                   spaces.obs_dtype, tuple(spaces.action_shape), spaces.action_dtype, rnn_state_size, tagged)

    def shapes(self) -> dict[str, tuple[tuple, str]]:
        n, t, b = self.num_slots, self.rollout, self.envs_per_split
        obs_dtype = self.obs_dtype if np.dtype(self.obs_dtype) == np.uint8 else "float32"
        rnn = {"rnn_states": ((n, b, self.rnn_state_size), "float32"),
               "rnn_live": ((n, b, self.rnn_state_size), "float32")} if self.rnn_state_size else {}
        tags = {"policy_id": ((n, t + 1, b), "int8")} if self.tagged else {}
        return {
            "obs": ((n, t + 1, b, *self.obs_shape), obs_dtype),
            "actions": ((n, t, b, *self.action_shape), self.action_dtype),
            "rewards": ((n, t, b), "float32"),
            "terminated": ((n, t, b), "uint8"),
            "truncated": ((n, t, b), "uint8"),
            "log_probs": ((n, t, b), "float32"),
            "policy_version": ((n, t, b) if self.tagged else (n, t), "int32"),
            "final_obs": ((n, b, *self.obs_shape), obs_dtype),
            "final_at": ((n, b), "int32"),
            **rnn,
            **tags,
        }


def create_slots(component, layout: SlotLayout) -> dict[str, np.ndarray | object]:
    """Allocate the pool in shared memory owned by ``component``; returns {field: SharedArray}."""
    return {name: component.create_array(shape, dtype, f"traj_{name}_")
            for name, (shape, dtype) in layout.shapes().items()}


def attach_slots(component, descs: dict[str, dict]) -> dict[str, object]:
    """Attach another worker's pool (in place on the same host, over comms otherwise); keys starting with "_"
    are metadata (the pool's incarnation), not arrays. Same-host fields are plain numpy views; other-host ones
    are :class:`~daskrl.runtime.memory.shm.RemoteArray` (use :func:`read_step` / :func:`write_step` for both)."""
    out = {}
    for name, desc in descs.items():
        if not name.startswith("_"):
            array = component.attach_array(desc)
            out[name] = array.array if hasattr(array, "array") else array
    return out


def attach_live_pools(component, buffers: dict[str, dict]) -> dict[str, tuple[dict[str, object], str]]:
    """:func:`attach_slots` for several rollout workers ({name: buffers()}): {name: (arrays, incarnation)}. A worker
    whose memory is gone (it was lost at the same time, and its successor's arrays are still to come) is left out
    and noted as the component's ``rollout-worker-gone`` incident: a recovery that reattaches everything must not
    fail on the part that is being recovered too."""
    out = {}
    for name, descs in buffers.items():
        try:
            out[name] = (attach_slots(component, descs), descs["_incarnation"])
        except SharedMemoryError as exc:
            component.incidents.note("rollout-worker-gone", exc)
    return out


def read_step(array, slot: int, t: int) -> np.ndarray:
    """``array[slot, t]`` for a numpy view (no copy) or a remote array (one RPC)."""
    return array[slot, t] if isinstance(array, np.ndarray) else array.read((slot, t))


def write_step(array, slot: int, t: int, value) -> None:
    if isinstance(array, np.ndarray):
        array[slot, t] = value
    else:
        array.write((slot, t), value)


def write_columns(array, index: tuple, columns: list[int] | None, value) -> None:
    """``array[(*index, columns)] = value``: some env columns of one step (``index`` = (slot, t)) or of one slot's
    states (``index`` = (slot,)), for a numpy view or a remote array (one RPC); ``columns`` None: all of them.
    Inference workers of several policies write their own columns of the same step this way."""
    full = index if columns is None else (*index, [int(c) for c in columns])  # msgpack may give a tuple
    if isinstance(array, np.ndarray):
        array[full] = value
    else:
        array.write(full, value)


def read_slot(array, slot: int) -> np.ndarray:
    """``array[slot]`` for a numpy view (no copy) or a remote array (one RPC)."""
    return array[slot] if isinstance(array, np.ndarray) else array.read(slot)


def write_slot(array, slot: int, value) -> None:
    if isinstance(array, np.ndarray):
        array[slot] = value
    else:
        array.write(slot, value)
