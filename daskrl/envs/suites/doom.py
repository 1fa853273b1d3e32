"""VizDoom scenarios as gymnasium envs: ``doom/basic``, ``doom/defend_the_center``, ... (extra ``daskrl[doom]``).

The settings follow what Sample Factory trains its Doom agents with, so returns compare: the game renders
160x120 RGB frames, resized to 128x72 by nearest neighbour (HWC uint8, what the CNN encoder takes); every action is
held for 4 game tics (``frameskip``) and the rewards of those tics are summed, so one env step is 4 frames; buttons are
grouped into discrete choices per scenario (a ``Discrete`` space for one group, ``MultiDiscrete`` for several: each group is
"no button" or one of its buttons). Health gathering adds +1 whenever health goes up (the raw game reward is
reported as ``info['episode_extra_stats']['true_objective']``, so ``info/true_objective`` shows it); battle adds
small rewards for gaining health and ammunition. Basic and deadly corridor rewards are in the hundreds: their
family defaults (daskrl/config/env_defaults.py) scale them by 0.01 for training, the logged returns stay raw.

Game variables (health, ammunition, ...) are in every step's ``info`` under their vizdoom names (``HEALTH``,
``AMMO2``, ...), so ``--info-keys HEALTH`` logs them per episode. With ``--env-kwargs '{"game_variables": true}'``
they are observed too, as Sample Factory's "measurements": the observation becomes a Dict of ``screen`` (the frame)
and ``game_variables`` (float32, the scenario's variables in its .cfg order), which the model encodes with the CNN
and an MLP (daskrl/models/inputs/dict_encoder.py). Off by default: the documented doom results are the frame's alone, and a
scenario without variables (my_way_home) keeps its plain frames either way.

Scenario files come with vizdoom (``vizdoom.scenarios_path``), except battle, which Sample Factory ships and
vizdoom does not: ``doom/battle`` takes its .cfg through ``--env-kwargs '{"cfg": "/path/battle.cfg"}'``.
The game starts at the first ``reset`` (not when the env is built), so probing an env's spaces is quick.
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.envs.registry import register_env
from daskrl.errors import EnvError

PREFIX = "doom/"
GAME_TICS_PER_SECOND = 35


@dataclass(frozen=True)
class Scenario:
    """One scenario: its .cfg file, its button groups (each a choice of "none" or one button), extra rewards."""

    cfg: str
    groups: tuple[tuple[str, ...], ...]
    health_reward: bool = False  # +1 whenever health rises (the gathering scenarios)
    delta_rewards: dict[str, tuple[float, float]] = field(default_factory=dict)  # variable -> (per unit up, down)
    bundled: bool = True  # vizdoom ships its files


_TURN = ("TURN_LEFT", "TURN_RIGHT")
_MOVE = ("MOVE_FORWARD", "MOVE_BACKWARD")
_STRAFE = ("MOVE_LEFT", "MOVE_RIGHT")
_ATTACK = ("ATTACK",)

SCENARIOS: dict[str, Scenario] = {
    "basic": Scenario("basic.cfg", (("MOVE_LEFT", "MOVE_RIGHT", "ATTACK"),)),  # idle, left, right, attack
    "defend_the_center": Scenario("defend_the_center.cfg", (_TURN, _ATTACK)),
    "health_gathering": Scenario("health_gathering.cfg", (_TURN + _MOVE,), health_reward=True),
    "my_way_home": Scenario("my_way_home.cfg", (_TURN, _MOVE)),
    "deadly_corridor": Scenario("deadly_corridor.cfg", (_TURN, _MOVE, _STRAFE, _ATTACK)),
    "defend_the_line": Scenario("defend_the_line.cfg", (_TURN, _ATTACK)),
    "battle": Scenario("battle.cfg", (_MOVE, _STRAFE, _TURN, _ATTACK), bundled=False,
                       delta_rewards={"HEALTH": (0.005, 0.003), "SELECTED_WEAPON_AMMO": (0.0002, 0.0001)}),
}


def scenario_names() -> list[str]:
    return [PREFIX + name for name in SCENARIOS]


class DoomEnv(gym.Env):
    """One VizDoom game (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": GAME_TICS_PER_SECOND // 4}
    #: the game runs in a process of its own and vizdoom releases the GIL while ``make_action`` waits on it, so a group
    #: of these steps them from a thread each (daskrl/envs/vector.py's STEPS_IN_ANOTHER_PROCESS)
    daskrl_steps_in_another_process = True

    def __init__(self, scenario: str, frameskip: int = 4, width: int = 128, height: int = 72,
                 cfg: str | None = None, render_mode: str | None = None, game_variables: bool = False) -> None:
        try:
            import cv2  # noqa: F401  (the resize)
            import vizdoom
        except ImportError as exc:
            raise EnvError(f"Doom env {PREFIX}{scenario} needs vizdoom and OpenCV ({exc}); install them with "
                           "pip install 'daskrl[doom]' on every machine that runs workers.") from exc
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"{PREFIX}{scenario} renders only 'rgb_array' frames, not {render_mode!r}")
        self.spec_ = SCENARIOS[scenario]
        self.cfg_path = cfg or os.path.join(vizdoom.scenarios_path, self.spec_.cfg)
        if not os.path.isfile(self.cfg_path):
            hint = "" if self.spec_.bundled else (" (vizdoom does not ship this scenario: pass the path of its .cfg, "
                                                  "next to its .wad, with --env-kwargs '{\"cfg\": \"PATH\"}')")
            raise EnvError(f"{PREFIX}{scenario}: scenario file {self.cfg_path!r} not found{hint}")
        self.scenario, self.frameskip, self.size = scenario, int(frameskip), (int(width), int(height))
        self.render_mode = render_mode
        self.buttons = [b for group in self.spec_.groups for b in group]
        nvec = [len(group) + 1 for group in self.spec_.groups]
        self.action_space = gym.spaces.Discrete(nvec[0]) if len(nvec) == 1 else gym.spaces.MultiDiscrete(nvec)
        screen = gym.spaces.Box(0, 255, (self.size[1], self.size[0], 3), dtype=np.uint8)
        self._names = _variable_names(self.cfg_path)
        self.observe_variables = bool(game_variables) and bool(self._names)
        self.observation_space = gym.spaces.Dict({
            "screen": screen, "game_variables": gym.spaces.Box(-np.inf, np.inf, (len(self._names),), np.float32)
        }) if self.observe_variables else screen
        self.game = None
        self._seed: int | None = None
        self._frame = np.zeros((120, 160, 3), np.uint8)  # the game's last screen (what render shows)
        self._variables: dict[str, float] = {}
        self._raw_return = 0.0

    def _start(self) -> None:
        import vizdoom

        game = vizdoom.DoomGame()
        game.load_config(self.cfg_path)
        game.set_doom_scenario_path(os.path.join(os.path.dirname(self.cfg_path),
                                                 os.path.basename(game.get_doom_scenario_path())))
        game.set_available_buttons([getattr(vizdoom.Button, b) for b in self.buttons])
        game.set_screen_resolution(vizdoom.ScreenResolution.RES_160X120)
        game.set_screen_format(vizdoom.ScreenFormat.RGB24)
        game.set_window_visible(False)
        # the engine writes its settings file; by default into the working directory, which is the user's project
        game.set_doom_config_path(os.path.join(tempfile.gettempdir(), "daskrl_vizdoom.ini"))
        game.set_sound_enabled(False)
        game.set_mode(vizdoom.Mode.PLAYER)
        if self._seed is not None:
            game.set_seed(self._seed)
        game.init()
        self.game = game
        self._names = [str(v).split(".")[-1] for v in game.get_available_game_variables()]
        self._timeout = game.get_episode_timeout()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._seed = int(seed) % 2**31
            if self.game is not None:
                self.game.set_seed(self._seed)
        if self.game is None:
            self._start()
        self.game.new_episode()
        self._raw_return = 0.0
        self._read_state()
        return self._observation(), dict(self._variables)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        raw = float(self.game.make_action(self._buttons(action), self.frameskip))
        before = self._variables
        finished = self.game.is_episode_finished()
        if not finished:
            self._read_state()
        reward = raw + self._shaping(before, self._variables, finished)
        self._raw_return += raw
        info: dict[str, Any] = dict(self._variables)
        terminated = truncated = False
        if finished:
            timed_out = self._timeout > 0 and self.game.get_episode_time() >= self._timeout \
                and not self.game.is_player_dead()
            truncated, terminated = timed_out, not timed_out
            info["episode_extra_stats"] = {"true_objective": self._raw_return}
        return self._observation(), reward, terminated, truncated, info

    def _buttons(self, action: Any) -> list[int]:
        choices = [int(action)] if isinstance(self.action_space, gym.spaces.Discrete) else [int(a) for a in action]
        pressed, first = [0] * len(self.buttons), 0
        for group, choice in zip(self.spec_.groups, choices, strict=True):
            if choice:  # 0: none of this group's buttons
                pressed[first + choice - 1] = 1
            first += len(group)
        return pressed

    def _read_state(self) -> None:
        state = self.game.get_state()
        if state is None:
            return
        self._frame = state.screen_buffer
        values = state.game_variables if state.game_variables is not None else ()  # none in my_way_home
        self._variables = {name: float(v) for name, v in zip(self._names, values, strict=False)}

    def _shaping(self, before: dict[str, float], after: dict[str, float], finished: bool) -> float:
        if finished or not before:
            return 0.0
        extra = 0.0
        if self.spec_.health_reward and after.get("HEALTH", 0.0) > before.get("HEALTH", 0.0):
            extra += 1.0
        for name, (up, down) in self.spec_.delta_rewards.items():
            delta = after.get(name, 0.0) - before.get(name, 0.0)
            extra += delta * up if delta > 0 else delta * down
        return extra

    def _observation(self) -> np.ndarray | dict[str, np.ndarray]:
        import cv2

        # nearest neighbour, as Sample Factory's Doom envs: area interpolation cost 0.094 ms a step against 0.009, 40%
        # of the rollout worker's own time stepping a game (the game's 4 tics: 0.25 ms)
        screen = cv2.resize(self._frame, self.size, interpolation=cv2.INTER_NEAREST)
        if not self.observe_variables:
            return screen
        values = np.array([self._variables.get(name, 0.0) for name in self._names], np.float32)
        return {"screen": screen, "game_variables": values}

    def render(self) -> np.ndarray | None:
        return self._frame.copy() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None


def _variable_names(cfg_path: str) -> list[str]:
    """The game variables a scenario file declares, read without starting the game (so spaces are known at once)."""
    import vizdoom

    game = vizdoom.DoomGame()
    game.load_config(cfg_path)
    return [str(v).split(".")[-1] for v in game.get_available_game_variables()]


def make_doom(scenario: str, **kwargs: Any) -> DoomEnv:
    return DoomEnv(scenario, **kwargs)


for _name in SCENARIOS:
    register_env(PREFIX + _name, functools.partial(make_doom, _name))
