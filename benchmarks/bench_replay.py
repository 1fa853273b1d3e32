"""Replay shards' throughput: transitions inserted and sampled per second, with 1 and 4 shards, on CartPole and on
84x84x4 frames, and the learner's share of time waiting on replay.

Run:  python benchmarks/bench_replay.py [--seconds 60] [--shards 1 4] [--envs cartpole frames] [--json]

Each configuration is a real ``--algo dqn`` run on the embedded cluster (one rollout worker per shard, each shard on
its rollout worker's Dask worker, one learner), for ``--seconds`` after its first draw. Frames are daskrl/Catch-v0
with the last 4 frames stacked on the channel axis (84x84x4 uint8, as Atari's preprocessing gives), encoded by the
Nature CNN. Inserted counts transitions the shards stored; sampled counts transitions they copied into minibatches
(draws x --batch-size). The update-to-data ratio ties the two (``--replay-ratio``, default here 1); the learner's
``waiting`` share is its time blocked on replay (no minibatch answered yet), the shards' ``insert`` and ``sample``
shares their own time on each. The table says how many cores the machine has: with fewer cores than processes, the
numbers measure sharing as much as replay.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import deque

import gymnasium as gym
import numpy as np

import daskrl
from daskrl.config import Config
from daskrl.envs.suites.demo import CatchEnv

sys.path.insert(0, os.path.dirname(__file__))
from common import stop_if_signalled  # noqa: E402


class StackLast(gym.Wrapper):
    """The last ``k`` frames side by side on the channel axis: 84x84x1 -> 84x84xk."""

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        self.frames: deque = deque(maxlen=k)
        h, w, c = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, (h, w, c * k), np.uint8)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.frames.maxlen):
            self.frames.append(obs)
        return np.concatenate(self.frames, axis=-1), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(obs)
        return np.concatenate(self.frames, axis=-1), reward, terminated, truncated, info


def catch_frames(render_mode: str | None = None) -> gym.Env:
    return StackLast(CatchEnv(), 4)


ENVS = {"cartpole": ("CartPole-v1", {"hidden_sizes": [64, 64]}),
        "frames": ("bench/Catch4-v0", {"encoder": "cnn", "replay_capacity": 20_000})}


class ReplayProbe(daskrl.Observer):
    """Reads the shards' counters at every poll; rates over the time after the first draw."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.points: list[tuple[float, int, int]] = []  # (time, inserted, draws)
        self.shares: dict = {}

    def on_poll(self, run) -> None:
        shards = [s["replay"] for name, s in run.ledger.last_stats.items() if "replay" in s]
        draws = sum(s["served"] for s in shards)
        self.points.append((time.monotonic(), sum(s["added"] for s in shards), draws))
        self.shares = dict(run.state.shares)
        first = next((t for t, _, d in self.points if d > 0), None)
        if first is not None and time.monotonic() - first >= self.seconds:
            run.request_stop("measured")

    def rates(self, batch: int) -> tuple[float, float]:
        steady = [p for p in self.points if p[2] > 0]
        if len(steady) < 2:
            return 0.0, 0.0
        (t0, i0, d0), (t1, i1, d1) = steady[0], steady[-1]
        return (i1 - i0) / (t1 - t0), (d1 - d0) * batch / (t1 - t0)


def measure(env_key: str, shards: int, seconds: float, batch: int, train_dir: str) -> dict:
    env, options = ENVS[env_key]
    config = Config.from_flat({"env": env, "algo": "dqn", "num_workers": shards, "replay_shards": shards,
                               "num_envs_per_worker": 8, "rollout": 16, "batch_size": batch, "replay_ratio": 1.0,
                               "learning_starts": 1000, "train_for_env_steps": 0, "train_for_seconds": seconds * 4,
                               "train_dir": train_dir, "experiment": f"{env_key}_{shards}", "dashboard_address": "",
                               "checkpoint_interval": 1e9, **options})
    probe = ReplayProbe(seconds)
    summary = daskrl.train(config, observers=[probe])
    stop_if_signalled(summary)
    inserted, sampled = probe.rates(batch)
    shares = probe.shares
    shard_shares = [shares.get(f"replay_{j}", {}) for j in range(shards)]
    return {"env": env_key, "shards": shards, "inserted_per_s": round(inserted), "sampled_per_s": round(sampled),
            "learner_waiting": round(shares.get("learner", {}).get("waiting", float("nan")), 3),
            "learner_train": round(shares.get("learner", {}).get("train", float("nan")), 3),
            "shard_insert": round(float(np.mean([s.get("insert", 0.0) for s in shard_shares])), 3),
            "shard_sample": round(float(np.mean([s.get("sample", 0.0) for s in shard_shares])), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per configuration")
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--envs", nargs="+", choices=list(ENVS), default=list(ENVS))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    daskrl.register_env("bench/Catch4-v0", catch_frames)
    print(f"{os.cpu_count()} cores; {args.seconds:g} s per configuration after the first draw; minibatch "
          f"{args.batch_size}; --replay-ratio 1\n")
    print("| obs | shards | inserted/s | sampled/s | learner waiting | learner training | shard insert | "
          "shard sample |")
    print("|---|---|---|---|---|---|---|---|")
    results = []
    with tempfile.TemporaryDirectory(prefix="daskrl_replay_") as train_dir:
        for env_key in args.envs:
            for shards in args.shards:
                r = measure(env_key, shards, args.seconds, args.batch_size, train_dir)
                results.append(r)
                print(f"| {env_key} | {shards} | {r['inserted_per_s']:,} | {r['sampled_per_s']:,} | "
                      f"{r['learner_waiting']:.0%} | {r['learner_train']:.0%} | {r['shard_insert']:.0%} | "
                      f"{r['shard_sample']:.0%} |", flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
