"""Two small real envs, registered at import, for tests and smoke runs.

`daskrl/Counting-v0` is fully deterministic and makes trajectory bookkeeping
checkable (obs t+1 echoes action t, resets are visible). `daskrl/Catch-v0` is a
cheap image env a CNN policy can actually learn, for end-to-end training checks.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.envs.registry import register_env


class CountingEnv(gym.Env):
    """obs = [step_in_episode, last_action, episode_index]; reward 1 when action == step % 3.

    `last_action` is -1 right after a reset and `episode_index` counts resets since
    the last seeded reset (which restarts it at 0, keeping seeded runs reproducible),
    so episode boundaries are visible in the observations.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, episode_length: int = 7, render_mode: str | None = None) -> None:
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        self.episode_length = int(episode_length)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, np.finfo(np.float32).max, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self._t = 0
        self._last_action = -1
        self._episode = -1

    def _obs(self) -> np.ndarray:
        return np.array([self._t, self._last_action, self._episode], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._last_action = -1
        self._episode = 0 if seed is not None else self._episode + 1
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        reward = 1.0 if action == self._t % 3 else 0.0
        self._t += 1
        self._last_action = action
        terminated = self._t >= self.episode_length
        return self._obs(), reward, terminated, False, {}


class CatchEnv(gym.Env):
    """84x84x1 frames: a ball falls straight down from a random column; catch it with the paddle.

    Actions: 0 left, 1 stay, 2 right. The episode ends when the ball reaches the
    paddle row (19 steps) with +1 for a catch and -1 for a miss. The paddle moves
    as fast as the ball falls, so every ball is catchable.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 15}

    SIZE = 84
    BALL = 4
    PADDLE_WIDTH = 12
    PADDLE_HEIGHT = 4
    SPEED = 4  # pixels per step, for both ball and paddle

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, shape=(self.SIZE, self.SIZE, 1), dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.paddle_top = self.SIZE - self.PADDLE_HEIGHT
        self.ball_x = 0
        self.ball_y = 0
        self.paddle_x = (self.SIZE - self.PADDLE_WIDTH) // 2

    def _frame(self) -> np.ndarray:
        frame = np.zeros((self.SIZE, self.SIZE, 1), dtype=np.uint8)
        frame[self.ball_y : self.ball_y + self.BALL, self.ball_x : self.ball_x + self.BALL] = 255
        frame[self.paddle_top :, self.paddle_x : self.paddle_x + self.PADDLE_WIDTH] = 255
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.ball_x = int(self.np_random.integers(0, self.SIZE - self.BALL + 1))
        self.ball_y = 0
        self.paddle_x = (self.SIZE - self.PADDLE_WIDTH) // 2
        return self._frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = (int(action) - 1) * self.SPEED
        self.paddle_x = min(max(self.paddle_x + move, 0), self.SIZE - self.PADDLE_WIDTH)
        self.ball_y = min(self.ball_y + self.SPEED, self.paddle_top - self.BALL)
        terminated = self.ball_y + self.BALL >= self.paddle_top
        reward = 0.0
        if terminated:
            caught = (
                self.ball_x + self.BALL > self.paddle_x and self.ball_x < self.paddle_x + self.PADDLE_WIDTH
            )
            reward = 1.0 if caught else -1.0
        return self._frame(), reward, terminated, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.repeat(self._frame(), 3, axis=2)


register_env("daskrl/Counting-v0", CountingEnv)
register_env("daskrl/Catch-v0", CatchEnv)
