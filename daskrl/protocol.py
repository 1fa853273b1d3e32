"""The messages of a run, in one place: queue and topic names, what each payload holds, and the wiring.

The data path, with the message on each arrow (payloads are msgpack-native dicts: indices, never arrays; small index
and weight vectors of replay travel as packed bytes)::

    RolloutWorker --InferenceRequest on policy:<k>--> InferenceWorker     (remote inference only)
    InferenceWorker --ActionsReady on actions:<w>--> RolloutWorker
    RolloutWorker --TrajectoryReady (signal)--> Learner (its batcher) or SamplingSink
    Learner/SamplingSink --FreeSlots on free:<w>--> RolloutWorker
    Learner (group leader) --SharesAssigned (signal)--> the other learners of its group (--num-learners K)

An off-policy algorithm (``--algo dqn``) puts replay shards where the learner stood::

    RolloutWorker --TrajectoryReady (signal)--> ReplayShard --FreeSlots on free:<w>--> RolloutWorker
    Learner --SampleRequest on replay:<shard>--> ReplayShard --BatchReady on batches:<learner>--> Learner
    Learner --PriorityUpdate on priorities:<shard>--> ReplayShard

``policy:``, ``actions:`` and ``free:`` are work queues (each message to exactly one taker); signals go to every
connected slot. A new policy version is no message to samplers: they poll the version in the learner's parameter
block (:mod:`daskrl.runtime.memory.params`), or in their host's relay block, whose relay the learner tells::

    Learner --ParamsPublished (signal)--> ParamRelay (one per host without the learner; --param-relay auto)
 :func:`wire_sampling_graph` makes all these connections for a set of components, and
:func:`wire_rollout` / :func:`wire_inference` for one newcomer. The scheduler event topics (low-rate control,
metrics and fault events, never data) are listed at the end.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import numpy as np

from daskrl.runtime.actors.component import ERROR_TOPIC
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.actors.signals import SlotRef
from daskrl.runtime.messaging.registry import FAULT_TOPIC
from daskrl.runtime.messaging.wiring import add_consumer, connect

# ---- queue names ----


def policy_queue(policy: int) -> str:
    """Inference requests for one policy (``policy:0``, ``policy:1``, ...); its inference workers take them."""
    return f"policy:{policy}"


def actions_queue(worker: str) -> str:
    """Answers of inference to one rollout worker."""
    return f"actions:{worker}"


def free_queue(worker: str) -> str:
    """Slots handed back to one rollout worker by whoever consumed them."""
    return f"free:{worker}"


def replay_queue(shard: str) -> str:
    """A learner's requests for minibatches from one replay shard."""
    return f"replay:{shard}"


def priorities_queue(shard: str) -> str:
    """New priorities of transitions one replay shard served."""
    return f"priorities:{shard}"


def batches_queue(learner: str) -> str:
    """Replay shards' answers to one learner: a minibatch is ready in the shard's batch block."""
    return f"batches:{learner}"


# ---- payloads ----


class InferenceRequest(TypedDict):
    """Rollout worker ``w`` needs actions for split ``s``, whose observations are at step ``t`` of slot ``slot``
    (short keys: one of these travels per split and env step)."""

    w: str
    s: int
    slot: int
    t: int
    v: NotRequired[int]  # --sync: act only with this policy version or a newer one
    c: NotRequired[list[int]]  # several policies: the columns this policy acts for (absent: every column)


class ActionsReady(TypedDict):
    """Actions and log-probs for split ``s`` at step ``t`` of ``slot`` are written into the slot."""

    s: int
    slot: int
    t: int
    p: NotRequired[int]  # the policy that answered (several policies: each answers for its own columns)


class TrajectoryReady(TypedDict):
    """Slot ``slot`` of rollout worker ``worker`` is full: ``frames`` env steps, written by incarnation ``inc``
    of that worker (a recreated worker has new memory, so older announcements are ignored)."""

    worker: str
    slot: int
    frames: int
    inc: str
    policies: NotRequired[list[int]]  # several policies: those that acted in the slot (their learners take it)


class FreeSlots(TypedDict):
    """The consumer is done with these slots of incarnation ``inc``; the rollout worker may fill them again (with
    ``--sync``: only with policy version ``version`` or newer, published before these slots were freed)."""

    slots: list[int]
    inc: str
    version: NotRequired[int]
    policy: NotRequired[int]  # several policies: whose learner is done with them (each one that took them frees)


class ParamsPublished(TypedDict):
    """The learner published ``version`` into its parameter block whose data segment is ``block`` (a policy's, or a
    self-play snapshot's); each host's relay fetches the newest version once (``--param-relay auto``)."""

    block: str
    version: int


class SharesAssigned(TypedDict):
    """A learner group's leader split a batch: ``shares[k - 1]`` lists the ``[worker, slot, incarnation]`` that
    member ``k`` trains on, for group ``generation`` (a member drops shares of a generation it is not in)."""

    generation: int
    shares: list[list[list]]


class SampleRequest(TypedDict):
    """Learner ``learner`` asks a replay shard for up to ``k`` minibatches (request ``id``: the answer names it, and
    the shard writes them into half ``id % 2`` of its batch block). The shard answers once it holds enough
    transitions and the update-to-data ratio allows at least one draw, with as many as it allows then."""

    learner: str
    id: int
    k: NotRequired[int]  # absent: 1


class BatchReady(TypedDict):
    """``count`` minibatches of ``batch`` transitions each are in half ``buffer`` of shard ``shard``'s batch block
    (incarnation ``inc``): drawn at ``positions`` (holding the transitions numbered ``stamps``) with importance
    ``weights``, each ``count x batch`` values packed by :func:`pack` (int64, int64, float32); ``size``
    transitions stored, ``added`` in all."""

    shard: str
    inc: str
    id: int
    buffer: int
    count: int
    batch: int
    positions: bytes
    stamps: bytes
    weights: bytes
    size: int
    added: int


class PriorityUpdate(TypedDict):
    """The TD errors (float32) of the transitions at ``positions`` (int64, numbered ``stamps``: int64), packed by
    :func:`pack`, of a shard's incarnation ``inc``: their new priorities, for every minibatch of one answer at once.
    A recreated shard drops them all, and a shard the ones whose position was overwritten since the draw."""

    inc: str
    positions: bytes
    stamps: bytes
    td_errors: bytes


def pack(values: np.ndarray, dtype: str) -> bytes:
    """An array as the raw bytes of ``dtype`` values: msgpack carries bytes in one piece, where a list costs a
    Python object per item at both ends and in the bus's payload check."""
    return np.ascontiguousarray(values, dtype=dtype).tobytes()


def unpack(data: bytes, dtype: str) -> np.ndarray:
    """A writable array of the ``dtype`` values :func:`pack` made (a copy: the bytes may be the sender's own, in
    one process)."""
    return np.frombuffer(data, dtype=dtype).copy()


# ---- wiring ----


def wire_rollout(client: Any, rollout: ComponentHandle, consumers: list[SlotRef]) -> None:
    """Full slots of ``rollout`` go to every one of ``consumers`` (each policy's learner, which takes the slots its
    policy acted in; or the sampling-only sink); freed slots and inference answers come back to it."""
    for consumer in consumers:
        connect(rollout.trajectory_ready, consumer, client)
    add_consumer(free_queue(rollout.name), rollout.on_free, client)
    add_consumer(actions_queue(rollout.name), rollout.on_actions, client)


def wire_inference(client: Any, inference: ComponentHandle, queue: str) -> None:
    """``inference`` takes its share of the requests on ``queue``."""
    add_consumer(queue, inference.on_request, client)


def wire_sampling_graph(client: Any, rollout: list[ComponentHandle], inference: list[ComponentHandle],
                        consumers: list[SlotRef], queue: str) -> None:
    """Every connection of the data path of one policy (see the module docstring), in force everywhere on return."""
    for handle in inference:
        wire_inference(client, handle, queue)
    for handle in rollout:
        wire_rollout(client, handle, consumers)


def wire_replay(client: Any, shard: ComponentHandle, learner: ComponentHandle) -> None:
    """``shard`` serves ``learner``'s requests and takes its priorities; its answers reach the learner."""
    add_consumer(replay_queue(shard.name), shard.on_sample, client)
    add_consumer(priorities_queue(shard.name), shard.on_priorities, client)
    add_consumer(batches_queue(learner.name), learner.on_batch_ready, client)


def wire_relay(client: Any, learners: list[ComponentHandle], relay: ComponentHandle) -> None:
    """Every version each learner publishes (its policy's and its snapshots') reaches ``relay``."""
    for learner in learners:
        connect(learner.params_published, relay.on_published, client)


def wire_learner_group(client: Any, leaders: list[ComponentHandle], members: list[ComponentHandle]) -> None:
    """The leader's batch splits reach every member of its group (``leaders``: the group's leader, or none when
    sampling only; no members: a learner that trains alone, nothing to wire)."""
    for leader in leaders:
        for member in members:
            connect(leader.shares_assigned, member.on_shares, client)


# ---- scheduler event topics ----

#: one row of metrics per report, from the runner to the dashboard page
METRICS_TOPIC = "daskrl-metrics"
#: a lost component that was recreated (or a learner restarted), with the time it took
RECOVERIES_TOPIC = "daskrl-recoveries"
#: a component whose loop has not turned for --heartbeat-timeout seconds, with its stack
HEARTBEATS_TOPIC = "daskrl-heartbeats"
#: an env that raised and was rebuilt (first report of each distinct error)
ENV_ERRORS_TOPIC = "daskrl-env-errors"
#: a PBT replacement (--pbt): target <- source, their returns, the hyperparameters before and after
PBT_TOPIC = "daskrl-pbt"
#: a change made to a live run from outside it (a run handle's set or scale): what, when, with which values
EVENTS_TOPIC = "daskrl-events"
#: a sweep's table of trials (status, env steps, returns), sent at every change for the dashboard page
SWEEPS_TOPIC = "daskrl-sweeps"
#: a league's payoff table among its current players and their Elo ratings, at every report (--league)
LEAGUE_TOPIC = "daskrl-league"

__all__ = [
    "ERROR_TOPIC", "ENV_ERRORS_TOPIC", "EVENTS_TOPIC", "FAULT_TOPIC", "HEARTBEATS_TOPIC", "LEAGUE_TOPIC",
    "METRICS_TOPIC", "PBT_TOPIC", "RECOVERIES_TOPIC", "SWEEPS_TOPIC",
    "ActionsReady", "BatchReady", "FreeSlots", "InferenceRequest", "PriorityUpdate", "SampleRequest", "SharesAssigned",
    "TrajectoryReady",
    "actions_queue", "batches_queue", "free_queue", "pack", "policy_queue", "priorities_queue", "replay_queue",
    "unpack",
    "wire_inference", "wire_learner_group", "wire_replay", "wire_rollout", "wire_sampling_graph",
]
