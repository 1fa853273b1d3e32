"""Stable-Baselines3's DQN, SAC or TD3 with rl-zoo's hyperparameters (dqn.yml, sac.yml, td3.yml) for one env, seed
and budget.

Run by bench_learning.py --algo dqn|sac|td3 --sb3 as a subprocess (so its launch time counts in its wall time, as
daskrl's start-up does in daskrl's); prints one JSON line at the end: the evaluation return (deterministic, as
rl-zoo evaluates), env steps and gradient steps taken, and the seconds spent in learn().

Run:  python benchmarks/sb3_offpolicy.py dqn CartPole-v1 SEED BUDGET EVAL_EPISODES
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

#: rl-zoo's dqn.yml (LunarLander's is v2's, run on v3); every env uses net_arch [256, 256]
RL_ZOO = {"dqn": {
    "CartPole-v1": dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                        exploration_final_eps=0.04),
    "MountainCar-v0": dict(learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000, gamma=0.98,
                           target_update_interval=600, train_freq=16, gradient_steps=8, exploration_fraction=0.2,
                           exploration_final_eps=0.07),
    "LunarLander-v3": dict(learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
                           target_update_interval=250, train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
                           exploration_final_eps=0.1),
}, "sac": {  # rl-zoo's sac.yml: SB3's defaults (net_arch [256, 256], batch 256, tau 0.005, one update per step)
    "Pendulum-v1": dict(learning_rate=1e-3),
    "HalfCheetah-v5": dict(learning_starts=10_000),
}, "td3": {  # rl-zoo's td3.yml: net_arch [400, 300], normal action noise of 0.1 (added in main)
    "Pendulum-v1": dict(learning_rate=1e-3, gamma=0.98, buffer_size=200_000, learning_starts=10_000,
                        train_freq=(1, "episode"), gradient_steps=-1),
    "HalfCheetah-v5": dict(learning_starts=10_000),  # its MuJoCo defaults (HalfCheetah-v4): SB3's, but this one
}}
#: rl-zoo's network per algorithm (DQN and SAC: [256, 256]; TD3: SB3's [400, 300])
NET_ARCH = {"dqn": [256, 256], "sac": [256, 256], "td3": [400, 300]}


def main() -> None:
    algo, env_id, seed, budget, episodes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5])
    try:
        from stable_baselines3 import DQN, SAC, TD3
        from stable_baselines3.common.evaluation import evaluate_policy
        from stable_baselines3.common.noise import NormalActionNoise
    except ImportError:
        print("stable-baselines3 is not installed: pip install stable-baselines3", file=sys.stderr)
        sys.exit(0)  # no JSON line: the caller reports it as skipped
    cls = {"dqn": DQN, "sac": SAC, "td3": TD3}[algo]
    options = dict(RL_ZOO[algo][env_id])
    if algo == "td3":
        import gymnasium as gym

        actions = gym.make(env_id).action_space.shape[0]
        options["action_noise"] = NormalActionNoise(mean=np.zeros(actions), sigma=0.1 * np.ones(actions))
    model = cls("MlpPolicy", env_id, seed=seed, policy_kwargs={"net_arch": NET_ARCH[algo]}, verbose=0, **options)
    t = time.time()
    model.learn(total_timesteps=budget)
    learn_s = time.time() - t
    mean, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=episodes, deterministic=True)
    print(json.dumps({"eval_return": float(mean), "env_steps": int(model.num_timesteps),
                      "gradient_steps": int(model._n_updates), "learn_s": learn_s}))


if __name__ == "__main__":
    main()
