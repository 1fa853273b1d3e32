"""Recovering from lost components: a dead rollout or inference worker is recreated, a dead learner restarts
from the newest checkpoint. Used by the runner; every step has a timeout, nothing waits forever.

Why it works: subscriptions live in the scheduler's registry by component *name*, so a component recreated
under the same name (on the restarted worker, which the nanny brings back under the same worker name, or on
another live worker) gets its signals and queues back as soon as it registers. What the registry cannot know is
done here: fresh shared-memory buffers are attached by the learner and the inference workers, a new learner's
parameter block is handed to the samplers, and slots that a dead consumer never handed back are reclaimed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from daskrl.runtime import ComponentError, spawn
from daskrl.runtime.component import ComponentHandle

if TYPE_CHECKING:
    from daskrl.runner import _Run

FAULT_TOPIC = "daskrl-faults"


class Recovery:
    def __init__(self, run: _Run) -> None:
        self.run = run
        self.events_seen = time.time()
        self.recoveries: list[dict[str, Any]] = []
        self.learner_restarts = 0
        self.lost_env_steps = 0  # steps counted by rollout workers that were since lost (their counters died)
        self.last_env_steps: dict[str, int] = {}

    # ---- detection ----

    def lost_components(self) -> set[tuple[str, str]]:
        """(name, address) of components the scheduler's registry reported lost since the last call (their
        worker left the cluster); the address tells a lost component from its already-recreated successor."""
        lost = set()
        try:
            events = self.run.client.get_events(FAULT_TOPIC)
        except Exception:
            return lost
        for stamp, event in events:
            if stamp > self.events_seen and event.get("event") == "component-lost":
                lost.add((event["component"], event["address"]))
        if events:
            self.events_seen = max(self.events_seen, max(stamp for stamp, _ in events))
        return lost

    # ---- recovery ----

    def recover(self, handle: ComponentHandle, cause: str) -> ComponentHandle:
        """Recreate ``handle``'s component; returns the new handle. Raises TrainingError when it cannot."""
        from daskrl.runner import TrainingError, _say

        t0 = time.monotonic()
        role = handle.cls.__name__
        _say(f"daskrl: lost {handle.name} ({role} on {handle.address}): {cause}; recovering")
        worker = self._replacement_worker(handle)
        if role == "RolloutWorker":
            self.lost_env_steps += self.last_env_steps.pop(handle.name, 0)
            new = self._recreate_rollout(handle, worker)
        elif role == "InferenceWorker":
            new = self._recreate_inference(handle, worker)
        elif role == "Learner":
            if self.learner_restarts >= self.run.config.run.max_learner_restarts:
                raise TrainingError(
                    f"the learner was lost {self.learner_restarts + 1} times (last: {cause}); giving up after "
                    f"--max-learner-restarts {self.run.config.run.max_learner_restarts}. The newest checkpoint is "
                    f"intact: continue with --resume")
            self.learner_restarts += 1
            new = self._restart_learner(handle, worker)
        else:
            raise TrainingError(f"component {handle.name!r} ({role}) was lost and cannot be recreated: {cause}")
        seconds = time.monotonic() - t0
        record = {"component": handle.name, "role": role, "cause": cause, "worker": worker,
                  "recovery_s": round(seconds, 3), "time": time.time()}
        self.recoveries.append(record)
        try:
            self.run.client.log_event("daskrl-recoveries", record)
        except Exception:
            pass
        _say(f"daskrl: recovered {handle.name} on {worker} in {seconds:.2f} s")
        return new

    def _replacement_worker(self, handle: ComponentHandle, wait_s: float = 15.0) -> str:
        """The restarted worker with the lost one's name if it comes back in time, else an idle live worker,
        else any live worker (sharing a process beats stopping the run)."""
        name = self.run.placement.names.get(handle.address)
        deadline = time.monotonic() + wait_s
        while True:
            workers = self.run.client.scheduler_info()["workers"]
            live = {a: w for a, w in workers.items() if a != handle.address}
            for address, info in live.items():
                if name is not None and str(info.get("name")) == name:
                    self.run.placement.names[address] = name
                    return address
            busy = {h.address for h in self.run.components()}
            idle = [a for a in live if a not in busy]
            if time.monotonic() > deadline and (idle or live):
                return sorted(idle or live)[0]
            time.sleep(0.2)

    def _recreate_rollout(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        sampler, run = self.run.sampler, self.run
        index = sampler.rollout.index(handle)
        config = sampler.rollout_config(index)
        config["params"] = run.params_desc
        new = spawn(run.client, handle.cls, handle.name, worker=worker, config=config)
        buffers = new.call("buffers")
        sampler.buffers[handle.name] = buffers
        if run.learner is not None:
            run.learner.call("attach_workers", {handle.name: buffers})
        for inference in sampler.inference:
            inference.call("attach_workers", {handle.name: buffers})
        new.call("start")
        sampler.rollout[index] = new
        return new

    def _recreate_inference(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        sampler, run, c = self.run.sampler, self.run, self.run.config
        index = sampler.inference.index(handle)
        new = spawn(run.client, handle.cls, handle.name, worker=worker, config={
            "run_id": run.session.run_id, "spaces": run.spaces.to_dict(), "model": dataclasses.asdict(c.model),
            "params": run.params_desc, "seed": c.run.seed, "numpy_inference": c.sampler.numpy_inference})
        new.call("attach_workers", sampler.buffers)
        new.call("start")
        sampler.inference[index] = new
        return new

    def _restart_learner(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        from daskrl.runner import _say

        run = self.run
        new = spawn(run.client, handle.cls, handle.name, worker=worker, config=run.learner_config(worker))
        if run.store.latest() is not None:
            state = run.store.load("latest")
            new.call("load_state", state, int(state.get("env_steps", 0)), timeout=120)
            _say(f"daskrl: learner restarts from {run.store.latest().name} "
                 f"({int(state.get('env_steps', 0)):,} env steps, policy version {state.get('policy_version', 0)})")
        else:
            _say("daskrl: learner restarts from its initial weights (no checkpoint written yet)")
        run.params_desc = new.call("params_desc")
        new.call("attach_workers", run.sampler.buffers)
        new.call("start")
        run.learner = new
        for component in run.sampler.components:
            try:
                component.call("set_params", run.params_desc)
                if component.cls.__name__ == "RolloutWorker":
                    component.call("reclaim_slots")  # slots the dead learner held are never coming back
            except ComponentError as exc:
                _say(f"daskrl: warning: {component.name} did not take the new parameters: {exc}")
        return new
