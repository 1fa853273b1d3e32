"""Atari 2600 games (the Arcade Learning Environment) with the standard DQN preprocessing: real image envs.

``atari/Breakout``, ``atari/Pong``, ... (the Atari-57 set): 84x84 grayscale frames (``screen_size`` in
``--env-kwargs`` changes the side), the last 4 stacked as channels (HWC uint8, what
:class:`~daskrl.models.inputs.encoders.CnnEncoder` takes), 4 emulator frames per step with the max of the last two,
up to 30 no-op actions after reset, sticky actions (ALE v5's default, probability 0.25), episodes cut at 108,000
frames. Rewards and episode returns are the game score, unclipped.

Needs the ``atari`` extra (``pip install 'daskrl[atari]'``): ale-py ships the ROMs, OpenCV does the resize.
Names are registered here without importing either, so ``import daskrl`` stays light.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.envs.registry import register_env
from daskrl.errors import EnvError

PREFIX = "atari/"
ATARI_57 = (
    "Alien Amidar Assault Asterix Asteroids Atlantis BankHeist BattleZone BeamRider Berzerk Bowling Boxing Breakout "
    "Centipede ChopperCommand CrazyClimber Defender DemonAttack DoubleDunk Enduro FishingDerby Freeway Frostbite "
    "Gopher Gravitar Hero IceHockey Jamesbond Kangaroo Krull KungFuMaster MontezumaRevenge MsPacman NameThisGame "
    "Phoenix Pitfall Pong PrivateEye Qbert Riverraid RoadRunner Robotank Seaquest Skiing Solaris SpaceInvaders "
    "StarGunner Surround Tennis TimePilot Tutankham UpNDown Venture VideoPinball WizardOfWor YarsRevenge Zaxxon"
).split()


class StackFramesHwc(gym.Wrapper):
    """The last ``num_frames`` 2-D frames as the channels of one HWC array, newest last.

    Gymnasium's FrameStackObservation stacks on a new first axis (CHW); the CNN encoder takes HWC, and keeping
    the stack in that layout avoids a transpose per step. With 4 frames (the DQN setting) a pixel's stack is one
    little-endian uint32, so dropping the oldest frame and appending the newest is a shift and an or over the
    frame's words, several times cheaper than the strided copy of the stack, which cost several percent of a
    Breakout step."""

    def __init__(self, env: gym.Env, num_frames: int = 4) -> None:
        super().__init__(env)
        h, w = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, (h, w, num_frames), dtype=np.uint8)
        packed = num_frames == 4 and sys.byteorder == "little"
        # one of the two representations: packed words (4 frames), or the HWC stack itself (any other count)
        self._packed = np.zeros((h, w), np.uint32) if packed else None
        self._newest = np.zeros((h, w), np.uint32) if packed else None  # the new frame widened to the top byte
        self.frames = None if packed else np.zeros((h, w, num_frames), dtype=np.uint8)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        frame, info = self.env.reset(**kwargs)
        if self._packed is not None:  # the first frame fills the stack, as in the DQN setup
            np.multiply(frame, np.uint32(0x01010101), out=self._packed)
            return self._stack(), info
        self.frames[:] = frame[..., None]
        return self.frames.copy(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        frame, reward, terminated, truncated, info = self.env.step(action)
        if self._packed is not None:
            self._packed >>= 8  # byte k (channel k) takes channel k + 1; the oldest frame drops out
            np.copyto(self._newest, frame)
            self._newest <<= 24
            self._packed |= self._newest
            return self._stack(), reward, terminated, truncated, info
        self.frames[..., :-1] = self.frames[..., 1:]
        self.frames[..., -1] = frame
        return self.frames.copy(), reward, terminated, truncated, info

    def _stack(self) -> np.ndarray:
        return self._packed.view(np.uint8).reshape(self.observation_space.shape).copy()


class AleFrames(gym.wrappers.AtariPreprocessing):
    """Gymnasium's AtariPreprocessing (grayscale, the max of the last two of ``frame_skip`` frames, resized), its
    ``step`` taken straight to ALE.

    The parent steps the wrapped ``AtariEnv`` once per emulator frame, and each of those builds an RGB screen
    (100 KB) and an info dict that the preprocessing throws away, through two wrappers (the screens alone were 13%
    of a Breakout rollout worker's busy time; inline sampling is 1.23x faster without all of it). Here each frame is
    one ``ale.act``, and the screen is read only for the two frames that are pooled, as the parent reads them. The
    same actions (the env's action set, full strength), rewards, ends, frames and info keys (``tests/cluster/test_atari.py``
    plays both side by side); ALE draws the sticky actions itself, so the same seed gives the same game. Resets are
    the parent's (its no-ops draw from the env's generator)."""

    def __init__(self, env: gym.Env, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        if self.terminal_on_life_loss or not self.grayscale_obs:
            raise ValueError("AleFrames plays grayscale frames with episodes that end at game over only")
        self._action_set = list(env.unwrapped._action_set)  # an action index -> ALE's action, as AtariEnv maps it

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        ale, chosen = self.ale, self._action_set[action]
        reward, terminated, truncated = 0.0, False, False
        for t in range(self.frame_skip):
            reward += ale.act(chosen, 1.0)
            terminated, truncated = ale.game_over(with_truncation=False), ale.game_truncated()
            if terminated or truncated:
                break
            if t == self.frame_skip - 2:
                ale.getScreenGrayscale(self.obs_buffer[1])
            elif t == self.frame_skip - 1:
                ale.getScreenGrayscale(self.obs_buffer[0])
        self.game_over = terminated
        info = {"lives": ale.lives(), "episode_frame_number": ale.getEpisodeFrameNumber(),
                "frame_number": ale.getFrameNumber()}
        return self._get_obs(), reward, terminated, truncated, info


def make_atari(game: str, num_frames: int = 4, sticky_actions: float = 0.25, noop_max: int = 30,
               screen_size: int = 84, render_mode: str | None = None, **ale_kwargs: Any) -> gym.Env:
    """One preprocessed Atari env (see the module docstring); ``ale_kwargs`` go to ALE's ``gym.make``."""
    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError as exc:
        raise EnvError(f"Atari env {PREFIX}{game} needs ale-py and OpenCV ({exc}); install them with "
                       "pip install 'daskrl[atari]' on every machine that runs workers.") from exc
    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=sticky_actions,
                   max_num_frames_per_episode=108_000, render_mode=render_mode, **ale_kwargs)
    env = AleFrames(env, noop_max=noop_max, frame_skip=4, screen_size=screen_size, grayscale_obs=True,
                    scale_obs=False)
    return StackFramesHwc(env, num_frames)


for _game in ATARI_57:
    register_env(PREFIX + _game, functools.partial(make_atari, _game))
