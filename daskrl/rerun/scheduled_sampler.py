"""A rollout worker stepped by a replay: each split fills its next slot when asked, acting at every step with the
version the recorded run acted with, from the split's own generator (as the run drew). Everything else is the
rollout worker's own code: the envs, their seeds, the slots, recurrent states and time-limit bootstraps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from daskrl.learning.slot_reader import LocalSlots, SlotReader, slot_source
from daskrl.protocol import TrajectoryReady
from daskrl.sampling.rollout_worker import RolloutWorker
from daskrl.setups import RolloutSetup

#: the weights of a policy version (as the learner published them)
WeightsOf = Callable[[int], dict[str, np.ndarray]]


class ScheduledSampler(RolloutWorker):
    """See the module docstring. Built inside a Dask worker (a component's base needs one), driven by hand: no
    thread of its own, no messages."""

    def on_configure(self, setup: RolloutSetup) -> None:
        super().on_configure(setup)
        self.source: LocalSlots = slot_source({name: shared.array for name, shared in self.shared.items()})
        self.announced: int | None = None  # the slot the last fill announced
        self.fills_done: dict[int, int] = {}  # split -> fills it made

    def trajectory_ready(self, payload: TrajectoryReady) -> None:
        """A slot is full: the replay reads it at once (no learner is listening)."""
        self.announced = payload["slot"]

    def fill(self, split: int, versions: np.ndarray, weights_of: WeightsOf, reader: SlotReader
             ) -> dict[str, np.ndarray]:
        """Step ``split`` through its next slot, acting at step ``t`` with version ``versions[t]``; the slot as the
        learner reads it (then handed back, so the split always finds a free one)."""
        policy = self.acting.policy
        if policy.fast is None:  # the torch model acts with one thread, as it did in the run's rollout worker
            import torch

            torch.set_num_threads(1)
        self.announced = None
        for t in range(self.rollout):
            version = int(versions[t])
            if policy.version != version:
                policy.take(version, weights_of(version))
            self.acting.act_split(split)
            self.step_split(split)
        slot = self.announced
        if slot is None:
            raise RuntimeError(f"split {split} of {self.name!r} stepped a slot's length without filling it")
        part = reader.read(self.source, slot)
        self._free(self.owners.handed_back([slot], None))
        self.fills_done[split] = self.fills_done.get(split, 0) + 1
        return part
