"""Env specs, spaces and the batched env group used by rollout workers (no Dask here)."""

from daskrl.envs import atari, testing  # noqa: F401  (register atari/<Game>, daskrl/Counting-v0, daskrl/Catch-v0)
from daskrl.envs.registry import (
    env_seed,
    make_env,
    probe_env,
    register_env,
    registered_envs,
    registered_factory,
)
from daskrl.envs.spaces import EnvError, EnvSpaces
from daskrl.envs.testing import CatchEnv, CountingEnv
from daskrl.envs.vector import EnvGroup, EnvStepError

__all__ = [
    "CatchEnv",
    "CountingEnv",
    "EnvError",
    "EnvGroup",
    "EnvSpaces",
    "EnvStepError",
    "env_seed",
    "make_env",
    "probe_env",
    "register_env",
    "registered_envs",
    "registered_factory",
]
