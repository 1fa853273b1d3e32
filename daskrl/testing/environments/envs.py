"""Small real envs whose right answer is known in closed form, for checking what the learner learns: the index of
the three families, so that an env spec such as ``daskrl.testing.environments.envs:staggered`` names any of them.

- :mod:`daskrl.testing.environments.single_agent_envs`: gymnasium envs (a constant reward cut by a time limit, with info
  numbers or a breaking camera; a dict-observation cue task; a hybrid discrete + continuous action task; an image
  task, which quadrant is lit; a light env whose step costs microseconds, for simulated large clusters);
- :mod:`daskrl.testing.environments.parallel_envs`: multi-agent envs in PettingZoo's Parallel API (agents that leave at known
  steps; two CartPoles; two hybrid-action tasks);
- :mod:`daskrl.testing.environments.turn_games`: two-player games in PettingZoo's AEC API (rewards across turns; race
  to ten).
"""

from daskrl.testing.environments.parallel_envs import (
    StaggeredAgentsEnv,
    TwinCartPoles,
    TwinHybridTargets,
    staggered,
    twin_cartpoles,
    twin_hybrid_targets,
)
from daskrl.testing.environments.single_agent_envs import (
    BrightQuadrantEnv,
    BrokenCameraEnv,
    ConstantRewardEnv,
    CueEnv,
    HybridTargetsEnv,
    InfoReportingEnv,
    LightEnv,
    bright_quadrant,
    broken_camera,
    constant_reward,
    cue,
    hybrid_targets,
    info_reporting,
    light,
)
from daskrl.testing.environments.turn_games import RaceToTenEnv, TakeTurnsEnv, TurnGame, race_to_ten, take_turns

__all__ = [
    "BrightQuadrantEnv",
    "BrokenCameraEnv",
    "ConstantRewardEnv",
    "CueEnv",
    "HybridTargetsEnv",
    "InfoReportingEnv",
    "LightEnv",
    "RaceToTenEnv",
    "StaggeredAgentsEnv",
    "TakeTurnsEnv",
    "TurnGame",
    "TwinCartPoles",
    "TwinHybridTargets",
    "bright_quadrant",
    "broken_camera",
    "constant_reward",
    "cue",
    "hybrid_targets",
    "info_reporting",
    "light",
    "race_to_ten",
    "staggered",
    "take_turns",
    "twin_cartpoles",
    "twin_hybrid_targets",
]
