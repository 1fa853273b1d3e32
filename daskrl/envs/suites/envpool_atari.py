"""``--env-backend envpool`` for ``atari/<Game>``: envpool's C++ emulators set up to give the observations of the
gymnasium path (daskrl/envs/suites/atari.py); the pool itself is :class:`daskrl.envs.suites.envpool_group.EnvpoolGroup`.

The gymnasium path goes through Python for every emulator frame (4 per step) and several wrappers; envpool runs the
frame skip, max-pooling, grayscale, resize and frame stack in C++ for the whole group in one call. Both use the
same settings: 84x84 grayscale frames (inter-area resize), 4 frames a step with the max of the last two, 4 frames
stacked (the first frame fills the stack at reset), 1 to 30 no-ops after a reset, sticky actions 0.25, episodes cut
at 27,000 steps (108,000 frames), the minimal action set, raw game rewards, no life loss as an episode end, no FIRE
at reset. With no randomness (``noop_max`` 1, ``sticky_actions`` 0) the two give the same pixels, step for step
(``tests/cluster/test_atari.py``); with it they draw from different generators (envpool's C++ mt19937 against gymnasium's
numpy one), so the same seed gives other no-op counts and sticky repeats, as two seeds would.

What differs, besides that: envpool has no zero-no-op reset (``noop_max`` must be at least 1), stacks frames
channel-first (the group transposes them into the slot's HWC layout), and resets an ended env in a second call (its
"next-step" auto-reset); its 108,000-frame limit counts steps after the reset's no-ops, ALE's counts frames with
them (the gymnasium path cuts an episode up to 8 steps sooner). Evaluation episodes, videos and ``daskrl enjoy``
play on the gymnasium env: the same observations.
"""

from __future__ import annotations

import re
from typing import Any

from daskrl.envs.suites.atari import PREFIX
from daskrl.errors import EnvError

#: daskrl's atari/<Game> options (--env-kwargs) -> envpool's names for them
_OPTIONS = {"num_frames": "stack_num", "sticky_actions": "repeat_action_probability", "noop_max": "noop_max",
            "full_action_space": "full_action_space"}
#: what envpool must be told to play as daskrl/envs/suites/atari.py does (its own defaults differ for these)
_AS_GYMNASIUM = {"use_fire_reset": False, "episodic_life": False, "reward_clip": False, "gray_scale": True,
                 "use_inter_area_resize": True, "frame_skip": 4, "max_episode_steps": 27_000, "stack_num": 4,
                 "repeat_action_probability": 0.25, "noop_max": 30, "zero_discount_on_life_loss": False}


def envpool_options(env: str, env_kwargs: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """envpool's task id and ``envpool.make`` options for ``atari/<Game>`` with ``env_kwargs``; raises
    :class:`EnvError` (one line) for an env or an option envpool cannot play as the gymnasium path does."""
    match = re.fullmatch(re.escape(PREFIX) + r"(\w+)", env)
    if match is None:
        raise EnvError(f"--env-backend envpool plays the {PREFIX}<Game> envs only, not {env!r}: leave --env-backend "
                       "at gymnasium for it")
    options = dict(_AS_GYMNASIUM)
    for key, value in (env_kwargs or {}).items():
        if key == "screen_size":
            options["img_height"] = options["img_width"] = int(value)
        elif key in _OPTIONS:
            options[_OPTIONS[key]] = value
        else:
            raise EnvError(f"--env-backend envpool cannot pass {key!r} of --env-kwargs to envpool (it takes "
                           f"{', '.join(sorted([*_OPTIONS, 'screen_size']))}); use --env-backend gymnasium")
    if options["noop_max"] < 1:
        raise EnvError("--env-backend envpool always plays at least one no-op after a reset: noop_max must be at "
                       "least 1 (or use --env-backend gymnasium)")
    return f"{match.group(1)}-v5", options
