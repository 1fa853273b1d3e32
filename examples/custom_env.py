"""A custom gymnasium env defined right here, registered with daskrl and trained on the embedded cluster.

    python examples/custom_env.py

`register_env` makes the name usable as `--env`/`config.env.env`; the factory travels to the worker processes
with the configuration, so the class does not have to live in an importable module.
"""

import gymnasium as gym
import numpy as np

import daskrl


class GuessTheSide(gym.Env):
    """The observation says which side (-1 or +1) is rewarded; pick it. 20 steps per episode, max return 20."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, episode_length: int = 20):
        self.episode_length = episode_length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.side = self.np_random.choice([-1.0, 1.0])
        return np.array([self.side], np.float32), {}

    def step(self, action):
        reward = 1.0 if (action == 1) == (self.side > 0) else 0.0
        self.t += 1
        self.side = self.np_random.choice([-1.0, 1.0])
        return np.array([self.side], np.float32), reward, self.t >= self.episode_length, False, {}


if __name__ == "__main__":
    daskrl.register_env("GuessTheSide-v0", GuessTheSide)
    config = daskrl.Config()
    config.env.env = "GuessTheSide-v0"
    config.run.experiment = "custom_env_example"
    config.run.stop_at_return = 19
    config.run.train_for_seconds = 60
    summary = daskrl.train(config)
    print(f"mean return {summary['episode_return_mean']:.1f} (max 20) after {summary['env_steps']:,} env steps")
