"""How a learner reads trajectory slots: from where, and what it takes of each, chosen once.

From where: each rollout worker's slots are a :class:`LocalSlots` (its shared memory on this host, copied in place)
or a :class:`RemoteSlots` (another host: read over Dask comms, ahead of need and in bulk with the other slots of
that host announced meanwhile), decided when its arrays are attached. What: a :class:`SlotReader` made with the
learner's batcher, from two choices that do not change during a run: which columns are this learner's
(:class:`WholeSlots`: every column and step, with one policy; :class:`PolicyColumns`: one policy's columns of tagged
slots, with a mask of its own steps) and which per-column start state the slots carry (a recurrent policy's
``rnn_states``; none for a feed-forward one). Both give every slot the same form, ``valid`` included, so joining
slots into a :class:`~daskrl.algo.appo.trajectory_batch.TrajectoryBatch` (:func:`join_parts`) asks nothing about them.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import numpy as np

from daskrl.algo.appo.trajectory_batch import TrajectoryBatch
from daskrl.errors import SharedMemoryError
from daskrl.learning.turns import compact_turns
from daskrl.protocol import FreeSlots, TrajectoryReady
from daskrl.runtime.memory.remote_reads import RemoteReads
from daskrl.runtime.memory.shm import decode_parts, read_together

#: seconds a remote slot read may take before the slot counts as lost (a host that vanished without closing its
#: connections; a killed worker's reads fail at once)
REMOTE_READ_TIMEOUT_S = 60.0


class SlotReadError(SharedMemoryError):
    """A slot of another host could not be read (its rollout worker is gone): the batcher drops that slot."""


#: the fields of a trajectory slot a training batch is made of
SLOT_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version", "final_at",
               "final_obs")
#: and of a recurrent policy's slot: the state each env's first step was acted from (the learner starts there);
#: per column ([B, S]), and a TrajectoryBatch field of the same name
STATE_FIELDS = ("rnn_states",)
#: and of a tagged slot (several policies, multi-agent envs): who acted, per column and step
TAG_FIELDS = ("policy_id",)
#: the per-step fields [T (+ 1), B, ...] a policy's cut of a slot keeps of each of its columns
STEP_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version")


class LocalSlots:
    """A rollout worker on this host: its slot arrays in shared memory, copied in place."""

    way = "shm"  # the data path it counts in (slots_shm, copy_s_shm)

    def __init__(self, arrays: dict[str, Any]) -> None:
        self.arrays = arrays

    def samples_per_slot(self) -> int:
        shape = self.arrays["rewards"].shape  # [slots, T, B]
        return int(shape[1] * shape[2])

    def prefetch(self, slot: int, fields: tuple[str, ...]) -> None:
        """Start reading a slot that :meth:`read` will be asked for (nothing to start in place)."""

    def ahead_bytes(self) -> int:
        """Bytes read ahead and not taken yet (none in place)."""
        return 0

    def read(self, slot: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        return {name: np.array(self.arrays[name][slot]) for name in fields}


class RemoteSlots(LocalSlots):
    """A rollout worker on another host: its arrays are RemoteArrays. With ``reads`` (the learner's
    :class:`~daskrl.runtime.memory.remote_reads.RemoteReads`) a slot announced to the batcher is read ahead, on the worker's
    event loop and in one RPC with the other slots of that host asked for meanwhile, so :meth:`read` mostly finds it
    there; without, every field of a slot in one blocking round trip."""

    way = "comms"

    def __init__(self, arrays: dict[str, Any], reads: RemoteReads | None = None) -> None:
        super().__init__(arrays)
        self.reads = reads
        #: slot -> (fields, the read started for its current contents, its bytes); a slot is announced again only
        #: after it was read and freed, and an announcement replaces what an earlier one left unread
        self.ahead: dict[int, tuple[tuple[str, ...], concurrent.futures.Future, int]] = {}

    def prefetch(self, slot: int, fields: tuple[str, ...]) -> None:
        if self.reads is not None:
            arrays = [self.arrays[name] for name in fields]
            nbytes = sum(int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize for a in arrays)
            self.ahead[slot] = (fields, self.reads.read(arrays, slot), nbytes)

    def ahead_bytes(self) -> int:
        return sum(nbytes for _, _, nbytes in list(self.ahead.values()))

    def read(self, slot: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        arrays = [self.arrays[name] for name in fields]
        if self.reads is None:
            return dict(zip(fields, read_together(arrays, slot), strict=True))
        started, future, _ = self.ahead.pop(slot, ((), None, 0))
        if future is None or started != fields:
            future = self.reads.read(arrays, slot)
        try:
            parts = future.result(timeout=REMOTE_READ_TIMEOUT_S)
        except Exception as exc:
            raise SlotReadError(f"reading slot {slot} from {arrays[0].address} failed ({type(exc).__name__}: "
                                f"{exc}); its rollout worker is gone or was replaced") from exc
        return dict(zip(fields, decode_parts(arrays, parts), strict=True))


def slot_source(arrays: dict[str, Any], reads: RemoteReads | None = None) -> LocalSlots:
    """The reader of one rollout worker's attached slot arrays (a RemoteArray has ``read``: another host's, read
    through ``reads`` where given)."""
    return RemoteSlots(arrays, reads) if hasattr(arrays["rewards"], "read") else LocalSlots(arrays)


class WholeSlots:
    """Every column and step of a slot is this learner's (one policy, untagged slots): all of them valid."""

    fields: tuple[str, ...] = ()

    def wants(self, payload: TrajectoryReady) -> bool:
        return True

    def take(self, part: dict[str, np.ndarray], state_fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The slot as it is, with ``valid`` all True and the slot's one policy version per step given to each
        column."""
        shape = part["rewards"].shape
        part["valid"] = np.ones(shape, bool)
        part["policy_version"] = np.broadcast_to(part["policy_version"][:, None], shape)
        return part

    def label(self, freed: FreeSlots) -> FreeSlots:
        return freed


class PolicyColumns:
    """One policy's part of tagged slots (several policies, multi-agent envs): the columns it acted in at least
    once, with ``valid`` marking its own steps (the other steps of those columns belong to another policy's episode,
    or to an agent that sat out). A turn-based player's column has its own steps moved to the front, each with what
    the others' moves gave it (:func:`~daskrl.learning.turns.compact_turns`)."""

    fields = TAG_FIELDS

    def __init__(self, policy: int, cut: tuple[int, int] | None = None) -> None:
        """``cut``: the policy's part of the observation and Box action rows, where agents' spaces differ (None:
        the whole rows; an action width 0: a discrete action, whole)."""
        self.policy = policy
        self.obs_rows, self.action_rows = (slice(None), slice(None)) if cut is None else \
            (slice(cut[0]), slice(cut[1] or None))

    def wants(self, payload: TrajectoryReady) -> bool:
        """Whether this policy acted in the announced slot (another policy's slot is its learner's)."""
        return self.policy in payload.get("policies", [self.policy])

    def take(self, part: dict[str, np.ndarray], state_fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        ids = part.pop("policy_id")  # [T + 1, B]: step T is who acts first in the next slot
        mine = ids == self.policy
        T = part["rewards"].shape[0]
        columns = np.flatnonzero(mine[:T].any(axis=0))
        out = {name: part[name][:, columns] for name in STEP_FIELDS}
        out["obs"] = out["obs"][..., self.obs_rows]
        out["actions"] = out["actions"][..., self.action_rows]
        out["valid"] = mine[:T, columns]
        out.update({name: part[name][columns] for name in state_fields})
        t, b = np.divmod(part["final_at"].astype(np.int64), ids.shape[1])  # the kept columns' finals, renumbered
        keep = np.isin(b, columns)
        out["final_obs"] = part["final_obs"][keep][..., self.obs_rows]
        out["final_at"] = (t[keep] * len(columns) + np.searchsorted(columns, b[keep])).astype(np.int32)
        return compact_turns(out, mine[T, columns], state_fields)

    def label(self, freed: FreeSlots) -> FreeSlots:
        """Slots freed by this policy's learner say so (each learner whose policy acted in a slot frees it)."""
        freed["policy"] = self.policy
        return freed


class SlotReader:
    """What a learner takes of each slot (see the module docstring)."""

    def __init__(self, columns: WholeSlots | PolicyColumns, state_fields: tuple[str, ...]) -> None:
        self.columns = columns
        self.state_fields = state_fields
        self.fields = SLOT_FIELDS + state_fields + columns.fields

    def wants(self, payload: TrajectoryReady) -> bool:
        """Whether an announced slot has anything for this learner."""
        return self.columns.wants(payload)

    def label(self, freed: FreeSlots) -> FreeSlots:
        """A message handing slots back, as this learner sends it."""
        return self.columns.label(freed)

    def prefetch(self, source: LocalSlots, slot: int) -> None:
        """Start copying slot ``slot`` of ``source`` where that is worth it (another host's): :meth:`read` takes it."""
        source.prefetch(slot, self.fields)

    def read(self, source: LocalSlots, slot: int) -> dict[str, np.ndarray]:
        """Copy slot ``slot`` out of ``source`` and take this learner's part of it."""
        part = source.read(slot, self.fields)
        used = int((part["final_at"] >= 0).sum())  # time-limit final observations fill the buffer from its start
        part["final_obs"] = part["final_obs"][:used]
        part["final_at"] = part["final_at"][:used]
        return self.columns.take(part, self.state_fields)

    def join(self, parts: list[dict[str, np.ndarray]]) -> TrajectoryBatch:
        return join_parts(parts, self.state_fields)


#: one policy's whole feed-forward slots: the reader a batcher has unless told otherwise
WHOLE_SLOTS = SlotReader(WholeSlots(), ())


def reader_for(policy: int, tagged: bool, cut: tuple[int, int] | None, recurrent: bool) -> SlotReader:
    """The reader of a learner of ``policy``: its columns of tagged slots, or whole slots; with the start states of a
    recurrent policy's slots."""
    columns = PolicyColumns(policy, cut) if tagged else WholeSlots()
    return SlotReader(columns, STATE_FIELDS if recurrent else ())


def join_parts(parts: list[dict[str, np.ndarray]], state_fields: tuple[str, ...] = ()) -> TrajectoryBatch:
    """Concatenate taken slots along the env axis (time-major [T, N]; per-column ``state_fields`` [N, ...]); a final
    observation at ``t * B + b`` of a slot whose envs start at column ``offset`` is at ``t * N + offset + b`` of the
    batch."""
    N = sum(p["rewards"].shape[1] for p in parts)
    final_index, offset = [], 0
    for p in parts:
        width = p["rewards"].shape[1]
        t, b = np.divmod(p["final_at"].astype(np.int64), width)
        final_index.append(t * N + offset + b)
        offset += width
    states = {name: _joined([p[name] for p in parts], axis=0) for name in state_fields}
    return TrajectoryBatch(
        obs=_joined([p["obs"] for p in parts], axis=1),
        actions=_joined([p["actions"] for p in parts], axis=1),
        rewards=_joined([p["rewards"] for p in parts], axis=1),
        dones=_joined([p["terminated"] | p["truncated"] for p in parts], axis=1),
        log_probs=_joined([p["log_probs"] for p in parts], axis=1),
        policy_version=_joined([p["policy_version"] for p in parts], axis=1),
        final_obs=_joined([p["final_obs"] for p in parts], axis=0),
        final_index=_joined(final_index, axis=0),
        valid=_joined([p["valid"] for p in parts], axis=1),
        **states,
    )


def _joined(arrays: list[np.ndarray], axis: int) -> np.ndarray:
    """``arrays`` concatenated along ``axis``; a batch of one slot (Atari's 32 x 32 steps) keeps its part's array,
    which the read copied out of the slot already: a second copy of its 29 MB of frames was 1.7% of a Breakout
    learner's time (py-spy)."""
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0])
    return np.concatenate(arrays, axis=axis)
