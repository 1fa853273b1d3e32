"""Places and wires the sampling components: rollout workers, optional inference workers, their queues.

Used by the runner both for training (the learner consumes the slots) and for sampling-only runs (a
:class:`~daskrl.sampling.sink.SamplingSink` does).
"""

from __future__ import annotations

from typing import Any

from daskrl.envs import registered_factory
from daskrl.runtime import SlotRef, add_consumer, connect, spawn_all
from daskrl.runtime.component import ComponentHandle
from daskrl.sampling.inference_worker import InferenceWorker
from daskrl.sampling.rollout_worker import RolloutWorker, actions_queue, free_queue


def policy_queue(policy: str = "default") -> str:
    return f"policy:{policy}"


class Sampler:
    """Rollout workers (+ inference workers) for one policy, placed one per given Dask worker."""

    def __init__(self, client, config, spaces, run_id: str, rollout_hosts: list[str],
                 inference_hosts: list[str] | None = None, params_desc: dict | None = None) -> None:
        self.client = client
        self.config = config
        self.spaces = spaces
        self.run_id = run_id
        self.rollout_hosts = rollout_hosts
        self.inference_hosts = inference_hosts or []
        self.params_desc = params_desc
        self.rollout: list[ComponentHandle] = []
        self.inference: list[ComponentHandle] = []
        self.buffers: dict[str, dict] = {}

    def rollout_config(self, index: int) -> dict[str, Any]:
        c = self.config
        return {
            "run_id": self.run_id, "env": c.env.env, "env_kwargs": c.env.env_kwargs, "spaces": self.spaces.to_dict(),
            "num_envs": c.sampler.num_envs_per_worker, "num_splits": c.sampler.num_splits(),
            "rollout": c.sampler.rollout, "slots_per_split": c.sampler.slots_per_split,
            "inference": c.sampler.inference, "worker_index": index, "seed": c.run.seed,
            "model": _model_cfg(c), "params": self.params_desc, "policy_queue": policy_queue(),
            # an env registered with register_env in this process travels with the config (cloudpickle)
            "env_factory": registered_factory(c.env.env), "env_failure_limit": c.sampler.env_failure_limit,
            "numpy_inference": c.sampler.numpy_inference, "inference_precision": c.sampler.inference_precision,
        }

    def create(self, consumer: SlotRef) -> None:
        """Create everything and connect full slots to ``consumer`` (and free-slot answers back); the slot
        arrays are then in ``self.buffers`` for the consumer to attach before :meth:`start`."""
        c = self.config
        spawn_all(self.client, [(RolloutWorker, f"rollout_{i}", host, self.rollout_config(i))
                                for i, host in enumerate(self.rollout_hosts)], created=self.rollout)
        for handle in self.rollout:
            self.buffers[handle.name] = handle.call("buffers")
        if c.sampler.inference == "remote":
            config = {"run_id": self.run_id, "spaces": self.spaces.to_dict(), "model": _model_cfg(c),
                      "params": self.params_desc, "seed": c.run.seed, "numpy_inference": c.sampler.numpy_inference,
                      "inference_precision": c.sampler.inference_precision}
            spawn_all(self.client, [(InferenceWorker, f"inference_{j}", host, config)
                                    for j, host in enumerate(self.inference_hosts)], created=self.inference)
            for handle in self.inference:
                handle.call("attach_workers", self.buffers)
                add_consumer(policy_queue(), handle.on_request, self.client)
        for handle in self.rollout:
            connect(handle.trajectory_ready, consumer, self.client)
            add_consumer(free_queue(handle.name), handle.on_free, self.client)
            add_consumer(actions_queue(handle.name), handle.on_actions, self.client)

    def start(self) -> None:
        for handle in self.inference + self.rollout:
            handle.call("start")

    @property
    def components(self) -> list[ComponentHandle]:
        return self.rollout + self.inference

    def stop(self) -> list[dict]:
        stats = []
        for handle in self.rollout + self.inference:
            try:
                stats.append(handle.call("stop", timeout=30))
            except Exception as exc:  # a dead component is already gone; stopping the rest matters more
                stats.append({"name": handle.name, "error": str(exc)})
        return stats


def _model_cfg(config) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config.model)
