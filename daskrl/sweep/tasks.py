"""Sweeping one configuration across several envs: a family's settings are worth their name only if they serve the
members nobody tuned them on, so a sweep with ``tasks`` runs every configuration on each task and judges it by
normalized scores, the way Atari results are put on one scale (Mnih et al., 2015: 0 is a random policy's return,
1 a reference's).

``tasks`` in a spec maps env ids to a reference return (the return that scores 1, e.g. rl-zoo's), or to
``{reference: R, random: F}`` where F (default 0) is the return that scores 0. Returns of different envs are then
comparable: ASHA's rungs, Optuna's objective and the ranking all use the mean score over a configuration's tasks and
seeds; each trial keeps its raw return too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """One env of a multi-task sweep and the two returns that put it on the common scale."""

    env: str
    reference: float
    random: float = 0.0

    def score(self, episode_return: float) -> float:
        """0 at the random policy's return, 1 at the reference's (NaN stays NaN: no episode yet)."""
        if math.isnan(episode_return):
            return math.nan
        return (episode_return - self.random) / (self.reference - self.random)



def env_slug(env: str) -> str:
    """An env id as a part of a directory name (``module:factory`` specs hold a colon)."""
    return re.sub(r"[^\w.-]+", "_", env)


def parse_tasks(raw: Any, problems: list[str]) -> tuple[Task, ...]:
    """``{env: reference}`` or ``{env: {reference: R, random: F}}``; every problem appended as one line."""
    if not raw:
        return ()
    if not isinstance(raw, dict):
        problems.append("tasks must map each env id to its reference return ({env: reference} or "
                        "{env: {reference: R, random: F}}): the returns of different envs are put on one scale")
        return ()
    tasks = []
    for env, value in raw.items():
        try:
            tasks.append(_task(str(env), value))
        except (TypeError, ValueError) as exc:
            problems.append(f"task {env!r}: {exc}")
    return tuple(tasks)


def _task(env: str, value: Any) -> Task:
    if isinstance(value, dict):
        unknown = set(value) - {"reference", "random"}
        if unknown or "reference" not in value:
            raise ValueError(f"give {{reference: R}} and optionally {{random: F}}, got {value!r}")
        task = Task(env, float(value["reference"]), float(value.get("random", 0.0)))
    else:
        task = Task(env, float(value))
    if not (math.isfinite(task.reference) and math.isfinite(task.random)) or task.reference == task.random:
        raise ValueError(f"the reference return ({task.reference:g}) must be finite and differ from the random "
                         f"policy's ({task.random:g})")
    return task


def tasks_json(tasks: tuple[Task, ...]) -> dict[str, dict[str, float]]:
    return {t.env: {"reference": t.reference, "random": t.random} for t in tasks}


__all__ = ["Task", "env_slug", "parse_tasks", "tasks_json"]
