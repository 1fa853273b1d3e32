"""How far a curriculum is: each task's recent episodes, and the rule that says when the current task is learned.

The rule reads a full window of the current task's own episodes (``--curriculum-window``), so that neither the
episodes of the task before (still ending after a switch: an env moves on at its next reset) nor those replaying an
earlier task (``--curriculum-replay``) count for it. ``success`` is the share of episodes with a positive return
(MiniGrid's goal reward, and that of most sparse-goal tasks); ``return`` is the mean return.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """``--curriculum-rule``: a measure of the current task's window, and the value it must reach."""

    measure: str  # "success" or "return"
    threshold: float

    @classmethod
    def parse(cls, text: str) -> Rule:
        """``success>=0.9`` or ``return>=200`` (the config checked the form)."""
        measure, _, value = text.partition(">=")
        return cls(measure.strip(), float(value))

    def value(self, returns: list[float]) -> float:
        if self.measure == "success":
            return sum(r > 0 for r in returns) / len(returns)
        return sum(returns) / len(returns)

    def __str__(self) -> str:
        return f"{self.measure}>={self.threshold:g}"


class TaskProgress:
    """Each task's last ``window`` returns, the task reached (``level``) and the tasks passed, as checkpoints keep
    them (:meth:`state`, and back with ``saved``)."""

    def __init__(self, tasks: int, rule: Rule, window: int, saved: dict[str, Any] | None = None) -> None:
        self.tasks, self.rule, self.window = tasks, rule, window
        self.level = min(int((saved or {}).get("level", 0)), tasks - 1)
        self.passed: list[dict[str, Any]] = list((saved or {}).get("passed", []))
        self.returns = [deque(maxlen=window) for _ in range(tasks)]
        self.episodes = [0] * tasks  # every episode of each task, since this run (or its resume) started

    def add(self, task: int, episode_return: float) -> None:
        if 0 <= task < self.tasks:
            self.returns[task].append(float(episode_return))
            self.episodes[task] += 1

    @property
    def last(self) -> bool:
        """The current task is the last: nothing follows it."""
        return self.level + 1 >= self.tasks

    def learned(self) -> dict[str, float] | None:
        """The rule's measure and value over the current task's full window when the rule holds there (and a task
        follows it); else None."""
        window = self.returns[self.level]
        if self.last or len(window) < self.window:
            return None
        value = self.rule.value(list(window))
        return {self.rule.measure: round(value, 4)} if value >= self.rule.threshold else None

    def advance(self, why: dict[str, Any], env_steps: int) -> int:
        """The current task was learned at ``env_steps`` (``why``: what the rule read): the next one is current.
        Returns it."""
        self.passed.append({"task": self.level, "env_steps": int(env_steps), **why})
        self.level += 1
        return self.level

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (plain data), and the summary shows."""
        return {"level": self.level, "passed": list(self.passed), "episodes": list(self.episodes)}
