"""The sampling-only consumer: counts full slots and hands them straight back (no learner).

It stands where the learner would, on the same signals and queues, so a sampling-only run measures the
sampler's real ceiling on a machine.
"""

from __future__ import annotations

from typing import Any

from daskrl.runtime.component import Component, slot
from daskrl.sampling.rollout_worker import free_queue


class SamplingSink(Component):
    def on_configure(self, **_: Any) -> None:
        self.frames = 0
        self.slots = 0

    @slot
    def on_trajectory(self, payload: dict) -> None:
        self.frames += payload["frames"]
        self.slots += 1
        self.put(free_queue(payload["worker"]), {"slots": [payload["slot"]]})

    def extra_stats(self) -> dict:
        return {"frames": self.frames, "slots": self.slots}
