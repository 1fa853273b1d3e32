"""A package as third-party env packages are (minigrid, procgen...): importing it registers a gymnasium id.

Used by tests/drills/test_env_packages.py, which puts this folder on sys.path (also for the worker processes it starts).
"""

import gymnasium as gym

ENV_ID = "DaskrlPkgCartPole-v0"

if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=200)
