"""Env specs, spaces and the batched env group used by rollout workers (no Dask here).

``suites/`` holds the env families daskrl registers (``demo``: two small envs users can run, daskrl/Counting-v0 and
daskrl/Catch-v0; ``atari`` the Atari-57 games; ``doom`` the VizDoom scenarios); ``layouts/`` how each kind of space
lies in a slot's rows; ``multi_agent`` steps PettingZoo envs as one column per (env, agent).
"""

from daskrl.envs.layouts.agent_spaces import is_multi_agent
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.multi_agent import MultiAgentGroup
from daskrl.envs.registry import env_seed, make_env, probe_env, register_env, registered_factory
from daskrl.envs.suites import atari, demo, doom  # noqa: F401  (register atari/<Game>, doom/<scenario>, the demo envs)
from daskrl.envs.suites.demo import CatchEnv, CountingEnv
from daskrl.envs.vector import EnvGroup
from daskrl.errors import EnvError, EnvStepError

__all__ = [
    "CatchEnv",
    "CountingEnv",
    "EnvError",
    "EnvGroup",
    "EnvSpaces",
    "EnvStepError",
    "MultiAgentGroup",
    "env_seed",
    "is_multi_agent",
    "make_env",
    "probe_env",
    "register_env",
    "registered_factory",
]
