"""Stable-Baselines3 PPO on CartPole-v1 with the rl-zoo hyperparameters, stopping at a mean return of 475.

Run by bench_train.py as a subprocess (so its launch time counts); prints one JSON line at the end.
rl-zoo's ppo.yml for CartPole-v1: n_envs 8, n_steps 32, batch_size 256, gae_lambda 0.8, gamma 0.98,
n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2, n_timesteps 1e5.
"""

from __future__ import annotations

import json
import os
import sys
import time

T0 = time.time()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sb3_common import StopAt, linear  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402


def main() -> None:
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 300_000
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, verbose=0)
    callback = StopAt(475.0, T0)
    t = time.time()
    model.learn(total_timesteps=int(budget), callback=callback)
    steps = model.num_timesteps
    print(json.dumps({"seconds_to_475": callback.reached_at, "env_steps": steps,
                      "fps": steps / (time.time() - t)}))


if __name__ == "__main__":
    main()
