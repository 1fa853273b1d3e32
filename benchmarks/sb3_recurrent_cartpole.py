"""sb3-contrib's RecurrentPPO on CartPole without velocities (examples/cartpole_no_velocity.py's env), stopping at a
mean return of 475.

Run by bench_train.py as a subprocess (so its launch time counts); prints one JSON line at the end. The settings are
rl-zoo's for RecurrentPPO on CartPoleNoVel-v1: n_envs 8, n_steps 32, batch_size 256, gae_lambda 0.8, gamma 0.98,
n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2, normalized observations and rewards, an LSTM
of 64 units for the actor and one for the critic.
"""

from __future__ import annotations

import json
import os
import sys
import time

T0 = time.time()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sb3_common import StopAt, linear  # noqa: E402
from sb3_contrib import RecurrentPPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from cartpole_no_velocity import cartpole_no_velocity  # noqa: E402


def main() -> None:
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 500_000
    env = VecNormalize(make_vec_env(cartpole_no_velocity, n_envs=8, seed=seed), gamma=0.98)
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                         ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, verbose=0,
                         policy_kwargs={"lstm_hidden_size": 64, "enable_critic_lstm": True, "ortho_init": False})
    callback = StopAt(475.0, T0)
    t = time.time()
    model.learn(total_timesteps=int(budget), callback=callback)
    steps = model.num_timesteps
    print(json.dumps({"seconds_to_475": callback.reached_at, "env_steps": steps,
                      "fps": steps / (time.time() - t)}))


if __name__ == "__main__":
    main()
