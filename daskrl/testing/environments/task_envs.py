"""A task-settable env (``set_task(task)``, as RLlib's ``TaskSettableEnv``): a corridor whose length is the task, so
that a curriculum's tasks are easy to hard with a known answer, for the curriculum's tests and docs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: the longest corridor: observations are scaled by it, so every task has the same spaces
LONGEST = 32


class CorridorEnv(gym.Env):
    """Walk right (action 1) or left (0) along a corridor of ``length`` cells from its start; reaching the end gives
    reward 1 and ends the episode, and ``2 * length + 4`` steps cut it (return 0). Always walking right wins every
    episode; a random walk rarely reaches the end of a long corridor (about a third of the episodes at length 4, a
    few in a hundred at 16). The observation is the position and the length, scaled by :data:`LONGEST`. The task is
    the length: ``set_task`` takes a whole number from 1 to :data:`LONGEST` and refuses anything else."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 4, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length = 1
        self.set_task(length)
        self._position = 0
        self._t = 0

    def set_task(self, task: Any) -> None:
        """The corridor's length from the next reset on (a whole number from 1 to LONGEST)."""
        if isinstance(task, bool) or not isinstance(task, int) or not 1 <= task <= LONGEST:
            raise ValueError(f"a corridor's task is its length, a whole number from 1 to {LONGEST}; got {task!r}")
        self.length = task

    def get_task(self) -> int:
        return self.length

    def _obs(self) -> np.ndarray:
        return np.array([self._position / LONGEST, self.length / LONGEST], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._position = 0
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._position = max(0, self._position + (1 if int(action) == 1 else -1))
        self._t += 1
        reached = self._position >= self.length
        return self._obs(), float(reached), reached, not reached and self._t >= 2 * self.length + 4, {}


def corridor(length: int = 4, render_mode: str | None = None) -> gym.Env:
    return CorridorEnv(length, render_mode)
