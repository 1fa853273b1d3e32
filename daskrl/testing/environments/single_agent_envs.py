"""Single-agent gymnasium envs whose right answer is known in closed form: a constant reward cut by a time limit
(the true value of every state is known), the same with numbers in its info dict or a camera that breaks, a
dict-observation cue task and an image task (the best return and a blind policy's return are known), and a
hybrid-action task (a discrete pick and a continuous aim, with a known best return); and a light env whose step
costs microseconds (many rollout workers on few cores, for simulated large clusters)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class ConstantRewardEnv(gym.Env):
    """Reward 1 at every step, forever, but cut by a time limit every ``limit`` steps (truncated, never terminated).

    The observation is the fraction of the limit used, ``[t / limit]``, so a value function *can* tell the end is
    near. The time limit is no part of the task: the true value of every state is ``1 / (1 - gamma)``. A learner that
    treats the cut as a death learns ``(1 - gamma ** (limit - t)) / (1 - gamma)`` instead, which falls to 1 at the end.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, limit: int = 20, render_mode: str | None = None) -> None:
        self.limit = int(limit)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._t / self.limit], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._obs(), 1.0, False, self._t >= self.limit, {}


def constant_reward(limit: int = 20, render_mode: str | None = None) -> gym.Env:
    return ConstantRewardEnv(limit, render_mode)


class InfoReportingEnv(ConstantRewardEnv):
    """:class:`ConstantRewardEnv` that reports numbers in its info dict: ``episode_extra_stats`` (Sample Factory's
    convention) at an episode's end with ``{"episode": n}`` (the count of episodes this env finished, 1, 2, ...),
    and ``distance`` (``t / 10``) at every step."""

    def __init__(self, limit: int = 20, render_mode: str | None = None) -> None:
        super().__init__(limit, render_mode)
        self.episodes = 0

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, _ = super().step(action)
        info: dict[str, Any] = {"distance": self._t / 10}
        if truncated:
            self.episodes += 1
            info["episode_extra_stats"] = {"episode": self.episodes}
        return obs, reward, terminated, truncated, info


def info_reporting(limit: int = 20, render_mode: str | None = None) -> gym.Env:
    return InfoReportingEnv(limit, render_mode)


class BrokenCameraEnv(ConstantRewardEnv):
    """:class:`ConstantRewardEnv` (return = ``limit``, whatever the policy does) whose ``rgb_array`` camera works
    once per instance and then raises: the check before a run passes, every video recorded during it fails."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, limit: int = 20, render_mode: str | None = None) -> None:
        super().__init__(limit, render_mode)
        self.renders = 0

    def render(self) -> np.ndarray:
        self.renders += 1
        if self.renders > 1:
            raise RuntimeError("camera unplugged")
        return np.zeros((8, 8, 3), np.uint8)


def broken_camera(limit: int = 20, render_mode: str | None = None) -> gym.Env:
    return BrokenCameraEnv(limit, render_mode)


class CueEnv(gym.Env):
    """Dict observations where one key carries everything: reward 1 when the action equals the cue, 0 otherwise,
    over ``length`` steps (then truncated), so the best return is ``length`` and a policy blind to the cue gets
    ``length / n`` on average.

    Keys: ``cue`` (Discrete(n + 1): the cue, or ``n`` = hidden), ``clock`` (Box [t / length]), ``view`` (a 3x3x1
    uint8 image, every pixel ``10 * t``), ``note`` (Text: no fixed shape, dropped by daskrl), and with
    ``masked=True`` ``action_mask`` (MultiBinary(n): the cue and one other action allowed; a forbidden action
    raises). With ``memory=True`` the cue is shown at the first step only (a recurrent policy's task).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n: int = 3, length: int = 8, memory: bool = False, masked: bool = False,
                 render_mode: str | None = None) -> None:
        self.n = int(n)
        self.length = int(length)
        self.memory = bool(memory)
        self.masked = bool(masked)
        self.render_mode = render_mode
        spaces: dict[str, gym.Space] = {
            "cue": gym.spaces.Discrete(self.n + 1),
            "clock": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
            "view": gym.spaces.Box(0, 255, (3, 3, 1), np.uint8),
            "note": gym.spaces.Text(8),
        }
        if self.masked:
            spaces["action_mask"] = gym.spaces.MultiBinary(self.n)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(self.n)
        self._t = 0
        self._cue = 0
        self._mask = np.ones(self.n, np.int8)

    def _obs(self) -> dict[str, Any]:
        shown = self._cue if not self.memory or self._t == 0 else self.n
        obs: dict[str, Any] = {
            "cue": shown,
            "clock": np.array([self._t / self.length], np.float32),
            "view": np.full((3, 3, 1), 10 * self._t, np.uint8),
            "note": "cue",
        }
        if self.masked:
            self._mask = np.zeros(self.n, np.int8)
            other = (self._cue + 1 + int(self.np_random.integers(self.n - 1))) % self.n
            self._mask[[self._cue, other]] = 1
            obs["action_mask"] = self._mask.copy()
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._cue = int(self.np_random.integers(self.n))
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        if self.masked and not self._mask[int(action)]:
            raise ValueError(f"action {int(action)} is masked out (mask {self._mask.tolist()})")
        reward = float(int(action) == self._cue)
        self._t += 1
        return self._obs(), reward, False, self._t >= self.length, {}


def cue(n: int = 3, length: int = 8, memory: bool = False, masked: bool = False,
        render_mode: str | None = None) -> gym.Env:
    return CueEnv(n, length, memory, masked, render_mode)


class HybridTargetsEnv(gym.Env):
    """Hybrid discrete + continuous control with a known optimum: each step shows a cue (one of ``n`` targets,
    one-hot); the action picks a target (Discrete(n)) and aims (a Box in [-1, 1]). The reward is 1 when the pick is
    the cue, minus the distance between the aim and the picked target's position (``POSITIONS``, spread over
    [-0.6, 0.6]), so the best aim depends on the pick. Episodes last ``length`` steps (then truncated): the best
    return is ``length``; a policy that picks at random and aims at 0 gets ``length * (1 / 3 - 0.4)`` for n = 3 (below
    0), and one that picks the cue but aims at 0 ``length * 0.6``.

    ``structure`` "tuple" makes the action space ``Tuple(Discrete(n), Box)``, "dict" ``Dict(target=Discrete(n),
    aim=Box)``. An action the space does not contain raises, so a wrong conversion from daskrl's flat action rows
    shows as an env error.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n: int = 3, length: int = 4, structure: str = "tuple", render_mode: str | None = None) -> None:
        if structure not in ("tuple", "dict"):
            raise ValueError(f"structure must be 'tuple' or 'dict', got {structure!r}")
        self.n, self.length, self.structure = int(n), int(length), structure
        self.render_mode = render_mode
        self.positions = np.linspace(-0.6, 0.6, self.n).astype(np.float32)
        target, aim = gym.spaces.Discrete(self.n), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Tuple((target, aim)) if structure == "tuple" else \
            gym.spaces.Dict({"target": target, "aim": aim})
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)
        self._t = 0
        self._cue = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n, np.float32)
        obs[self._cue] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._cue = int(self.np_random.integers(self.n))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        target, aim = (action["target"], action["aim"]) if self.structure == "dict" else action
        target = int(target)
        reward = float(target == self._cue) - abs(float(aim[0]) - float(self.positions[target]))
        self._t += 1
        self._cue = int(self.np_random.integers(self.n))
        return self._obs(), reward, False, self._t >= self.length, {}


def hybrid_targets(n: int = 3, length: int = 4, structure: str = "tuple",
                   render_mode: str | None = None) -> gym.Env:
    return HybridTargetsEnv(n, length, structure, render_mode)


class BrightQuadrantEnv(gym.Env):
    """Images whose answer is where the light is: ``size`` x ``size`` x 1 uint8 frames with one quadrant lit (255)
    and the rest dark, a new random quadrant every step; reward 1 when the action names the lit quadrant (0 top
    left, 1 top right, 2 bottom left, 3 bottom right), over ``length`` steps (then truncated). The best return is
    ``length``; a policy blind to the pixels gets ``length / 4`` on average. Small frames, so an image encoder learns
    it in seconds."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, size: int = 16, length: int = 8, render_mode: str | None = None) -> None:
        if size < 2 or size % 2:
            raise ValueError(f"size must be an even number of pixels >= 2, got {size}")
        self.size = int(size)
        self.length = int(length)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (self.size, self.size, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self._t = 0
        self._lit = 0

    def _obs(self) -> np.ndarray:
        self._lit = int(self.np_random.integers(4))
        half = self.size // 2
        frame = np.zeros((self.size, self.size, 1), np.uint8)
        row, col = divmod(self._lit, 2)
        frame[row * half:(row + 1) * half, col * half:(col + 1) * half] = 255
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self._lit)
        self._t += 1
        return self._obs(), reward, False, self._t >= self.length, {}


def bright_quadrant(size: int = 16, length: int = 8, render_mode: str | None = None) -> gym.Env:
    return BrightQuadrantEnv(size, length, render_mode)


class LightEnv(gym.Env):
    """An env whose step costs a few microseconds, so that two cores carry dozens of rollout workers: the control
    plane of a large simulated cluster (``benchmarks/scale_simulation.py``) is then what is measured, not env work.

    The state is a tiny float vector that the action nudges (``+step`` or ``-step`` on every entry, wrapped into
    ``[-1, 1)``); the reward is 1 when the action matches the sign of the first entry, else 0; every episode lasts
    exactly ``length`` steps (truncated). The best return is ``length``, a blind policy's about half of it.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 32, size: int = 4, step: float = 0.37, render_mode: str | None = None) -> None:
        if length < 1 or size < 1:
            raise ValueError(f"LightEnv needs length >= 1 and size >= 1, got length={length}, size={size}")
        self.length, self.step_size = int(length), float(step)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(int(size),), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._state = np.zeros(int(size), dtype=np.float32)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._state = self.np_random.uniform(-1.0, 1.0, self._state.shape).astype(np.float32)
        self._t = 0
        return self._state.copy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = 1.0 if (int(action) == 1) == (self._state[0] >= 0) else 0.0
        state = self._state + (self.step_size if int(action) == 1 else -self.step_size)
        self._state = ((state + 1.0) % 2.0 - 1.0).astype(np.float32)
        self._t += 1
        return self._state.copy(), reward, False, self._t >= self.length, {}


def light(length: int = 32, size: int = 4, step: float = 0.37, render_mode: str | None = None) -> gym.Env:
    return LightEnv(length, size, step, render_mode)
