"""--record-schedule, the learner's half: the slots each training step took, in the batch's order, and its metrics.

With the rollout workers' halves (:mod:`daskrl.sampling.slots.fill_log`) this is what ``daskrl replay`` needs to
feed a learner the same batches in the same order. A step's entry is
``{"step", "slots": [[worker, slot, incarnation], ...], "version", "metrics"}``: ``version`` is the one published
after the step, and the metrics are the trainer's (the replay checks it computes the same). A step that trained
with other hyperparameters than the step before it (the first step, and any after ``run.set``) also has
``"hyperparams"``: the values it trained with, which the replay sets before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StepLog:
    """Every training step of this learner, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.hyperparams: dict[str, float] | None = None  # what the last step trained with

    def trained(self, step: int, slots: Sequence[tuple[str, int, str]], version: int, metrics: dict[str, float],
                hyperparams: dict[str, float]) -> None:
        entry = {"step": step, "slots": [list(slot) for slot in slots], "version": version,
                 "metrics": {k: float(v) for k, v in metrics.items()}}
        if hyperparams != self.hyperparams:
            self.hyperparams = entry["hyperparams"] = dict(hyperparams)
        self.entries.append(entry)

    def news(self) -> dict:
        """The entries since the last call, for the runner."""
        entries, self.entries = self.entries, []
        return {"steps": entries} if entries else {}


class NoStepLog:
    """Without --record-schedule: nothing is kept."""

    def trained(self, step: int, slots: Sequence[tuple[str, int, str]], version: int, metrics: dict[str, float],
                hyperparams: dict[str, float]) -> None:
        pass

    def news(self) -> dict:
        return {}
