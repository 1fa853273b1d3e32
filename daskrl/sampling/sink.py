"""The sampling-only consumer: counts full slots and hands them straight back (no learner).

It stands where the learner would, on the same signals and queues, so a sampling-only run measures the
sampler's real ceiling on a machine.
"""

from __future__ import annotations

from daskrl.protocol import FreeSlots, TrajectoryReady, free_queue
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import slot


class SamplingSink(Component):
    def on_configure(self, setup: None) -> None:
        self.frames = 0
        self.slots = 0

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        self.frames += payload["frames"]
        self.slots += 1
        freed: FreeSlots = {"slots": [payload["slot"]], "inc": payload["inc"]}
        self.put(free_queue(payload["worker"]), freed)

    def extra_stats(self) -> dict:
        return {"frames": self.frames, "slots": self.slots}
