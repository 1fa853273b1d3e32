"""The runner's side of a curriculum: it reads every finished episode's task and return, and when the current task is
learned it moves every rollout worker's envs on to the next one.

It is an observer of the run's loop (:mod:`daskrl.driver.loop.observers`). Whether the current task is learned is
:meth:`CurriculumObserver.ready`: by default ``--curriculum-rule`` over the task's own window (:mod:`.progress`); a
subclass passed to ``daskrl.train(config, observers=[...])`` brings a rule of its own and takes the built-in one's
place. The move is ``set_task_level`` on each rollout worker, whose envs take it at their next reset, and the level
kept on the samplers, where a rollout worker created later (a recovered or added one) starts. Each move is an
event (the console, ``events.csv``, TensorBoard, the dashboard); every report row carries ``curriculum_task``, and
every checkpoint the progress, so that ``--resume`` goes on with the task it had reached.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from daskrl.config import ConfigError
from daskrl.curriculum.progress import Rule, TaskProgress
from daskrl.driver.loop.observers import Observer, Run
from daskrl.driver.loop.steering import record_event
from daskrl.envs.curriculum_env import RETURN_KEY, TASK_KEY, Curriculum
from daskrl.runtime.actors.handles import call_each


class CurriculumObserver(Observer):
    """See the module docstring."""

    def __init__(self) -> None:
        self.progress: TaskProgress | None = None

    def ready(self, run: Run) -> dict[str, Any] | None:
        """Whether the current task is learned: what the move's event and the checkpoints note of why (numbers by
        name), or None while it is not. Override for a rule of your own (``self.progress`` holds each task's recent
        returns and the task reached)."""
        assert self.progress is not None
        return self.progress.learned()

    def before_components(self, run: Run) -> None:
        """The progress a resumed run kept, or a new one; the rollout workers start at its task."""
        env = run.config.env
        curriculum = Curriculum.of(env)
        if curriculum is None:
            raise ConfigError([f"{type(self).__name__} moves a curriculum on, and this run has none: name its tasks "
                               "(--curriculum ID ID or --curriculum-tasks TASK TASK)"])
        self.curriculum = curriculum
        self.progress = TaskProgress(len(curriculum), Rule.parse(env.curriculum_rule), env.curriculum_window,
                                     run.state.curriculum)
        run.state.curriculum = self.progress.state()
        run.state.extras_readers.append(self.take_episodes)
        where = "resumed at" if self.progress.level else "starts with"
        run.say(f"daskrl: curriculum of {len(curriculum)} tasks {where} task {self.progress.level} "
                f"({curriculum.label(self.progress.level)})")
        samplers = run.fleet.samplers
        samplers.course = dataclasses.replace(samplers.course, task_level=self.progress.level)

    def take_episodes(self, extras: list[dict[str, float]]) -> None:
        """Finished episodes' info numbers (see RunState.extras_readers): those of a curriculum env count."""
        assert self.progress is not None
        for numbers in extras:
            if TASK_KEY in numbers and RETURN_KEY in numbers:
                self.progress.add(int(numbers[TASK_KEY]), numbers[RETURN_KEY])

    def on_poll(self, run: Run) -> None:
        assert self.progress is not None
        why = None if self.progress.last else self.ready(run)
        if why is not None:
            self.move(run, why)

    def move(self, run: Run, why: dict[str, Any]) -> None:
        """The current task is learned (``why``): every rollout worker's envs move on to the next task."""
        assert self.progress is not None
        passed = self.progress.level
        level = self.progress.advance(why, run.state.env_steps)
        samplers = run.fleet.samplers  # kept there before the calls: a worker recreated meanwhile starts there
        samplers.course = dataclasses.replace(samplers.course, task_level=level)
        call_each(samplers.rollout, "set_task_level", level, warn=run.warn)
        run.state.curriculum = self.progress.state()
        reason = ", ".join(f"{name} {value:.3g}" if isinstance(value, float) else f"{name} {value}"
                           for name, value in why.items())
        run.say(f"daskrl: curriculum: task {passed} ({self.curriculum.label(passed)}) learned ({reason}) at "
                f"{run.state.env_steps:,} env steps; moving on to task {level} ({self.curriculum.label(level)})")
        record_event(run, "curriculum", {"task": level, "passed": passed, **why})

    def summary(self) -> dict[str, Any]:
        return {"curriculum": None if self.progress is None else self.progress.state()}
