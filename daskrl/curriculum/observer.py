"""The runner's side of a curriculum: it reads every finished episode's task and return, and when the rule holds on the
current task (:mod:`.progress`) it moves every rollout worker's envs on to the next one.

It is an observer of the run's loop (:mod:`daskrl.driver.loop.observers`), as a user's own rule would be: the move is
``set_task_level`` on each rollout worker, which its envs take at their next reset, and the level kept on the
samplers, where a rollout worker created later (a recovered or added one) starts. Each move is an event (the
console, ``events.csv``, TensorBoard, the dashboard); every report row carries ``curriculum_task``, and every
checkpoint the progress, so that ``--resume`` goes on with the task it had reached.
"""

from __future__ import annotations

from typing import Any

from daskrl.curriculum.progress import Rule, TaskProgress
from daskrl.driver.loop.observers import Observer, Run
from daskrl.driver.loop.steering import record_event
from daskrl.envs.curriculum_env import RETURN_KEY, TASK_KEY, Curriculum
from daskrl.runtime.actors.handles import call_each


class CurriculumObserver(Observer):
    """See the module docstring."""

    def __init__(self) -> None:
        self.progress: TaskProgress | None = None

    def on_start(self, run: Run) -> None:
        env = run.config.env
        curriculum = Curriculum.of(env)
        assert curriculum is not None, "a curriculum observer needs --curriculum or --curriculum-tasks"
        self.curriculum = curriculum
        self.progress = TaskProgress(len(curriculum), Rule.parse(env.curriculum_rule), env.curriculum_window,
                                     run.state.curriculum)
        run.state.curriculum = self.progress.state()
        run.state.extras_readers.append(self.take_episodes)
        where = "resumed at" if self.progress.level else "starts with"
        run.say(f"daskrl: curriculum of {len(curriculum)} tasks {where} task {self.progress.level} "
                f"({curriculum.label(self.progress.level)}); it moves on when {self.progress.rule} over "
                f"{env.curriculum_window} episodes of the task")

    def take_episodes(self, extras: list[dict[str, float]]) -> None:
        """Finished episodes' info numbers (see RunState.extras_readers): those of a curriculum env count."""
        assert self.progress is not None
        for numbers in extras:
            if TASK_KEY in numbers and RETURN_KEY in numbers:
                self.progress.add(int(numbers[TASK_KEY]), numbers[RETURN_KEY])

    def on_poll(self, run: Run) -> None:
        assert self.progress is not None
        value = self.progress.learned()
        if value is None:
            return
        passed = self.progress.level
        level = self.progress.advance(value, run.state.env_steps)
        run.fleet.samplers.task_level = level  # before the calls: a worker recreated meanwhile starts there
        call_each(run.fleet.samplers.rollout, "set_task_level", level, warn=run.warn)
        run.state.curriculum = self.progress.state()
        run.say(f"daskrl: curriculum: task {passed} ({self.curriculum.label(passed)}) learned ({self.progress.rule.measure}"
                f" {value:.3g} over {self.progress.window} episodes) at {run.state.env_steps:,} env steps; "
                f"moving on to task {level} ({self.curriculum.label(level)})")
        record_event(run, "curriculum", {"task": level, "passed": passed, self.progress.rule.measure: round(value, 4)})

    def summary(self) -> dict[str, Any]:
        return {"curriculum": None if self.progress is None else self.progress.state()}
