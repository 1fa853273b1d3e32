"""Which recorded fill each training step took, in order, and what a replay refuses before it starts.

A step names its slots as ``(worker, slot, incarnation)``; a worker's fills name ``(split, slot)``. A slot is filled
again only after the learner took it, so the k-th time a step took slot ``i`` of a worker is that worker's k-th fill
of slot ``i``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from daskrl.monitor.outputs.schedule_file import Schedule
from daskrl.sampling.slots.fill_log import versions_from_runs


@dataclass(frozen=True, eq=False)
class Fill:
    """One recorded fill: worker ``worker``'s ``position``-th, the ``nth`` of split ``split``, acting with
    ``versions``."""

    worker: int
    position: int
    split: int
    nth: int
    versions: np.ndarray  # [rollout] the version that acted at each step


class ScheduleIndex:
    """The fills of each split in order, and each step's fills in the batch's order (see the module docstring)."""

    def __init__(self, schedule: Schedule, rollout: int) -> None:
        replaced = sorted(w for w, incs in schedule.incarnations.items() if len(incs) > 1)
        if replaced:
            raise ValueError(f"rollout worker {replaced[0]} was replaced during the recorded run (a fault recovery "
                             "restarted its envs), which a replay does not re-create: replay a run without one")
        numbers = [int(step["step"]) for step in schedule.steps]
        if numbers != list(range(1, len(numbers) + 1)):
            at = next(i for i, n in enumerate(numbers) if n != i + 1)
            raise ValueError(f"the recorded learner's training steps do not run 1, 2, 3, ... (step {numbers[at]} where "
                             f"{at + 1} was due): it restarted from a checkpoint during the run (a fault recovery), "
                             "which a replay does not re-create")
        self.worker_of_incarnation = {inc: w for w, incs in schedule.incarnations.items() for inc in incs}
        self.by_split: dict[tuple[int, int], list[Fill]] = defaultdict(list)
        by_slot: dict[tuple[int, int], deque[Fill]] = defaultdict(deque)
        for worker, entries in schedule.fills.items():
            for position, (split, slot, runs) in enumerate(entries):
                fill = Fill(worker, position, split, len(self.by_split[worker, split]),
                            versions_from_runs(runs, rollout))
                self.by_split[worker, split].append(fill)
                by_slot[worker, slot].append(fill)
        self.steps: list[list[Fill]] = []
        for step in schedule.steps:
            taken = [self._taken(by_slot, name, slot, inc) for name, slot, inc in step["slots"]]
            if any(fill is None for fill in taken):
                break  # the run stopped before the runner collected these fills: replayable up to here
            self.steps.append(taken)

    def _taken(self, by_slot: dict, name: str, slot: int, incarnation: str) -> Fill | None:
        worker = self.worker_of_incarnation.get(incarnation)
        queue = by_slot.get((worker, slot))
        return queue.popleft() if queue else None

    def fills_of(self, worker: int, split: int) -> list[Fill]:
        return self.by_split[worker, split]
