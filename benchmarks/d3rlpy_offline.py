"""One d3rlpy training run on a dataset exported by ``bench_offline.py``, in d3rlpy's own venv (d3rlpy 2.8 pins
gymnasium 1.0.0): the same algorithm, networks, minibatches and rates as daskrl's ``--algo bc|iql|cql`` defaults,
then deterministic episodes on the env. Prints one JSON object: the mean return and the updates a second of d3rlpy's
``fit`` (its own minibatch sampling included, as daskrl's count includes the shards').

Run (by bench_offline.py): <venv>/bin/python d3rlpy_offline.py DATA.npz ALGO SEED UPDATES EPISODES ENV
"""

from __future__ import annotations

import json
import sys
import time

import d3rlpy
import gymnasium as gym
import numpy as np
from d3rlpy.models.encoders import VectorEncoderFactory
from d3rlpy.preprocessing import MinMaxActionScaler

HIDDEN = [256, 256]


def algorithm(name: str, low: np.ndarray, high: np.ndarray, device: str = "cpu:0"):
    """daskrl's defaults for ``name`` (docs/offline.md) in d3rlpy's terms."""
    common = {"batch_size": 256, "action_scaler": MinMaxActionScaler(minimum=low, maximum=high)}
    encoder = VectorEncoderFactory(HIDDEN, activation="relu")
    if name == "bc":
        return d3rlpy.algos.BCConfig(learning_rate=1e-3, policy_type="deterministic", encoder_factory=encoder,
                                     **common).create(device=device)
    if name == "iql":
        return d3rlpy.algos.IQLConfig(actor_learning_rate=3e-4, critic_learning_rate=3e-4, gamma=0.99, tau=0.005,
                                      expectile=0.7, weight_temp=3.0, max_weight=100.0, actor_encoder_factory=encoder,
                                      critic_encoder_factory=encoder, value_encoder_factory=encoder,
                                      **common).create(device=device)
    if name == "cql":  # the conservative weight fixed at 5 (no Lagrange tuning: alpha_learning_rate 0)
        return d3rlpy.algos.CQLConfig(actor_learning_rate=1e-4, critic_learning_rate=3e-4, temp_learning_rate=1e-4,
                                      alpha_learning_rate=0.0, initial_alpha=1.0, conservative_weight=5.0,
                                      n_action_samples=10, soft_q_backup=False, gamma=0.99, tau=0.005,
                                      actor_encoder_factory=encoder, critic_encoder_factory=encoder,
                                      **common).create(device=device)
    raise SystemExit(f"unknown algorithm {name!r}")


def main() -> None:
    path, name, seed, updates, episodes, env_id = sys.argv[1:7]
    seed, updates, episodes = int(seed), int(updates), int(episodes)
    data = np.load(path)
    dataset = d3rlpy.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                        timeouts=data["timeouts"])
    d3rlpy.seed(seed)
    env = gym.make(env_id)
    algo = algorithm(name, env.action_space.low, env.action_space.high)
    start = time.perf_counter()
    algo.fit(dataset, n_steps=updates, n_steps_per_epoch=updates, show_progress=False, save_interval=10**9)
    seconds = time.perf_counter() - start
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=12345 + episode)
        done, total = False, 0.0
        while not done:
            action = algo.predict(obs[None].astype(np.float32))[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    print(json.dumps({"return_mean": float(np.mean(returns)), "returns": returns, "updates": updates,
                      "updates_per_s": updates / seconds}))


if __name__ == "__main__":
    main()
