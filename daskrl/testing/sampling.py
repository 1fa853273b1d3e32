"""Small real components for the sampling tests (importable on every worker): a slot consumer that keeps
copies of what it receives, and a parameter source whose versions are recognizable in the slots.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.actor_critic import build_model
from daskrl.protocol import FreeSlots, TrajectoryReady, free_queue
from daskrl.runtime import dask_internals
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import slot
from daskrl.runtime.memory.params import ParameterPublisher
from daskrl.sampling.slots.trajectories import attach_slots


def poison_value(dtype: np.dtype) -> Any:
    """A value no rollout or inference worker ever writes into a field of this dtype."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.nan
    if dtype.kind == "u":
        return 7  # uint8 fields hold 0/1 flags or 0/255 image pixels in the test envs
    return -1


@dataclass(frozen=True)
class CollectorSetup:
    max_keep: int = 100_000  # slots copied at most (later ones are counted, not kept)
    poison: bool = True  # overwrite each slot before handing it back


class SlotCollector(Component):
    """Consumes full slots like the learner does: copies each slot when ``trajectory_ready`` arrives (up to
    ``max_keep``), then poisons it and hands it back on ``free:<worker>``.

    Poisoning (NaN floats, -1 ints, 7 in uint8 fields) makes a step that is not written again before the slot
    comes back visible. ``hold(True)`` keeps the slots instead of freeing them, so a sampler runs out of
    slots and comes to rest.
    """

    def on_configure(self, setup: CollectorSetup) -> None:
        self.max_keep = setup.max_keep
        self.poison = setup.poison
        self.views: dict[str, dict[str, np.ndarray]] = {}
        self.kept: list[dict[str, Any]] = []
        self.seen: dict[str, int] = defaultdict(int)
        self.frames = 0
        self.holding = False
        self.held: dict[str, list[int]] = defaultdict(list)
        self.incarnations: dict[str, str] = {}

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        def attach() -> list[str]:
            self.views.update({name: attach_slots(self, descs) for name, descs in buffers.items()})
            return sorted(self.views)

        return await self.on_own_thread(attach)

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        worker, index = payload["worker"], payload["slot"]
        self.incarnations[worker] = payload["inc"]
        view = self.views[worker]
        if len(self.kept) < self.max_keep:
            self.kept.append({"worker": worker, "slot": index, "frames": payload["frames"],
                              "arrays": {k: np.array(a[index], copy=True) for k, a in view.items()}})
        self.seen[worker] += 1
        self.frames += payload["frames"]
        if self.holding:
            self.held[worker].append(index)
        else:
            self._release(worker, index)

    def _release(self, worker: str, index: int) -> None:
        if self.poison:
            for array in self.views[worker].values():
                array[index] = poison_value(array.dtype)
        freed: FreeSlots = {"slots": [index], "inc": self.incarnations[worker]}
        self.put(free_queue(worker), freed)

    def _set_hold(self, on: bool) -> None:
        self.holding = on
        if not on:
            for worker, indices in self.held.items():
                for index in indices:
                    self._release(worker, index)
            self.held.clear()

    async def hold(self, on: bool = True) -> None:
        """Keep (True) or hand back (False) the slots from now on; releasing also hands back those held."""
        await self.on_own_thread(self._set_hold, on)

    async def collected(self, start: int = 0) -> list[dict[str, Any]]:
        """The copies kept so far, in arrival order (from index ``start``)."""
        return await self.on_own_thread(lambda: self.kept[start:])

    def extra_stats(self) -> dict:
        return {"seen": dict(self.seen), "frames": self.frames, "kept": len(self.kept),
                "held": {w: len(s) for w, s in self.held.items()}}


def sharpen_actor(weights: dict[str, np.ndarray], scale: float) -> dict[str, np.ndarray]:
    """The weights with the action head's weight matrix times ``scale``: away from the near-uniform initial policy,
    small differences in the features (a bfloat16 encoder's) show in the log-probs."""
    return {k: v * np.float32(scale) if k.startswith("actor.") and k.endswith(".weight") else v
            for k, v in weights.items()}


#: how far each version moves the action head's first output (a logit, or a Gaussian's mean): versions act
#: differently, so a step's log-prob names the version that acted
VERSION_SHIFT = 0.25


def _head_bias_key(net: nn.Module) -> str | None:
    """The state-dict key of the action head's output bias (a Discrete head's logits, a Gaussian's mean)."""
    names = {id(module): name for name, module in net.named_modules()}
    head = next((getattr(net.actor, a) for a in ("logits", "mean") if isinstance(getattr(net.actor, a, None),
                                                                               nn.Linear)), None)
    return None if head is None else f"{names[id(head)]}.bias"


def source_weights(spaces: EnvSpaces, model: ModelConfig, seed: int, actor_scale: float, version: int = 0
                   ) -> dict[str, np.ndarray]:
    """The weights a :class:`PolicySource` publishes as ``version``: build_model's of ``seed``, the action head
    sharpened (:func:`sharpen_actor`), its first output moved by ``version * VERSION_SHIFT``."""
    net = build_model(spaces, model, seed)
    weights = sharpen_actor(net.state_dict_numpy(), actor_scale)
    key = _head_bias_key(net)
    if key is not None:
        weights[key] = weights[key].copy()
        weights[key][0] += np.float32(version * VERSION_SHIFT)
    return weights


def expected_log_probs(spaces: EnvSpaces, model: ModelConfig, precision: str, actor_scale: float, obs: np.ndarray,
                       actions: np.ndarray, versions: np.ndarray, seed: int = 0) -> np.ndarray:
    """Log-probs [T, N] of the actions under the PolicySource's policy (of ``seed``) at each step's version
    (``versions`` [T] or [T, N]; NaN where it is 0: nothing published), in ``precision``, one step's envs at a time
    (the batch an inline worker acted on). Run it in a worker process to check a sampler's bfloat16 numbers
    exactly: the same bfloat16 forward pass rounds differently in a process started with other thread settings
    (measured: OMP_NUM_THREADS=1 at start-up, as the cluster's workers have it, moved features by one bfloat16
    step)."""
    versions = np.broadcast_to(np.asarray(versions).reshape(len(actions), -1), actions.shape[:2])
    out = np.full(actions.shape[:2], np.nan, np.float32)
    for version in np.unique(versions[versions >= 1]):
        net = build_model(spaces, model, seed)
        net.load_state_dict_numpy(source_weights(spaces, model, seed, actor_scale, int(version)))
        net.eval()
        if precision == "bfloat16":
            net.use_bfloat16_encoders()
        at = versions == version
        with torch.no_grad():
            for t in np.flatnonzero(at.any(axis=1)):  # only the steps this version acted at
                log_probs = net.evaluate(torch.from_numpy(obs[t]), torch.from_numpy(actions[t]))[0].numpy()
                out[t, at[t]] = log_probs[at[t]]
    return out


@dataclass(frozen=True)
class PolicySourceSetup:
    spaces: EnvSpaces
    model: ModelConfig = field(default_factory=ModelConfig)
    seed: int = 0  # the initial weights are build_model's with this seed (like the learner's)
    remote: bool = False  # also publish over Dask comms
    actor_scale: float = 1.0  # see sharpen_actor


class PolicySource(Component):
    """Owns a :class:`~daskrl.runtime.memory.params.ParameterPublisher` for a sampling policy, like the learner.

    Version ``v`` is :func:`source_weights` of ``v``: its action head's first output moved by ``v *
    VERSION_SHIFT``, so the log-prob a sampler writes at a step names the parameters that acted there
    (:func:`expected_log_probs`). ``actor_scale`` sharpens the action head (:func:`sharpen_actor`).
    """

    def on_configure(self, setup: PolicySourceSetup) -> None:
        self.publisher = ParameterPublisher(self, source_weights(setup.spaces, setup.model, setup.seed,
                                                                 setup.actor_scale), remote=setup.remote)

    async def desc(self) -> dict:
        return self.publisher.desc

    def _publish(self) -> int:
        s = self.setup
        return self.publisher.publish(source_weights(s.spaces, s.model, s.seed, s.actor_scale,
                                                     self.publisher.version + 1))

    async def publish(self) -> int:
        """Publish the next version; returns its number."""
        return await self.on_own_thread(self._publish)

    async def version(self) -> int:
        return self.publisher.version


@dataclass
class Sampled:
    """What :func:`sample_slots` saw: the slot copies the collector kept, the rollout worker's stats once they were
    in, its final stats (its last word, episodes included) and the requests each inference worker answered."""

    kept: list[dict[str, np.ndarray]]
    stats: dict[str, Any]
    final: dict[str, Any]
    served: list[int]


def sample_slots(cluster: Any, config: Any, spaces: EnvSpaces, params: list, slots: int, name: str,
                 timeout: float = 30.0) -> Sampled:
    """Run one real rollout worker of ``config`` (acting inline, or through ``--num-inference-workers`` inference
    workers per policy, each policy's on its own queue) into a :class:`SlotCollector` until ``slots`` full slots
    were copied, then stop them all. ``params``: the parameter block of each policy to act with (see ``role_setups``). The
    rollout worker runs on the cluster's first worker, the collector and inference workers on the others: the wiring
    every sampling test needs, written once."""
    from daskrl.driver.fleet.role_setups import role_setups
    from daskrl.protocol import policy_queue, wire_inference, wire_rollout
    from daskrl.runtime.actors.handles import spawn, spawn_all
    from daskrl.sampling.inference_worker import InferenceWorker
    from daskrl.sampling.rollout_worker import RolloutWorker

    hosts = sorted(dask_internals.cluster_workers(cluster.client))
    setups = role_setups(config, spaces, params, remote_params=False)
    collector = spawn(cluster.client, SlotCollector, f"{name}_collector", run_id=cluster.run_id, worker=hosts[1],
                      setup=CollectorSetup(max_keep=slots))
    rollout: list = []
    inference: list = []
    try:
        spawn_all(cluster.client, [(RolloutWorker, f"{name}_rollout", hosts[0], setups.rollout[0])],
                  run_id=cluster.run_id, created=rollout)
        buffers = {rollout[0].name: rollout[0].call("buffers")}
        wire_rollout(cluster.client, rollout[0], [collector.on_trajectory])
        per_policy = config.sampler.num_inference_workers
        specs = [(k, j) for k in range(len(setups.inference)) for j in range(per_policy)]
        spawn_all(cluster.client, [(InferenceWorker, f"{name}_inference_p{k}_{j}", hosts[1 + i % (len(hosts) - 1)],
                                    setups.inference[k]) for i, (k, j) in enumerate(specs)],
                  run_id=cluster.run_id, created=inference)
        for (k, _), handle in zip(specs, inference, strict=True):
            handle.call("attach_workers", buffers)
            wire_inference(cluster.client, handle, policy_queue(k))
        collector.call("attach_workers", buffers)
        for handle in [collector, *inference, *rollout]:
            handle.call("start")
        deadline = time.monotonic() + timeout
        while collector.call("stats")["kept"] < slots:
            if time.monotonic() > deadline:
                raise AssertionError(f"{slots} slots not collected within {timeout} s")
            time.sleep(0.05)
        kept = [k["arrays"] for k in collector.call("collected")]
        stats = rollout[0].call("stats")
        served = [h.call("stats")["requests"] for h in inference]
        final = rollout[0].call("stop", timeout=30)
    finally:
        for handle in rollout + inference + [collector]:
            try:
                handle.call("stop", timeout=30)
            except Exception:  # stopped already, or lost: nothing left to stop
                pass
    return Sampled(kept, stats, final, served)
