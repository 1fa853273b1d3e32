"""MiniGrid DoorKey with a curriculum against the hard task alone: the success rate on DoorKey-16x16 at one budget.

Run:  python benchmarks/bench_curriculum.py [--json] [--steps 3000000] [--seeds 0 1 2] [--episodes 200]

Each seed trains twice, as a user types it, with daskrl's defaults and ``--seed S --train-for-env-steps STEPS``:
``--env MiniGrid-DoorKey-5x5-v0 --curriculum MiniGrid-DoorKey-8x8-v0 MiniGrid-DoorKey-16x16-v0 --env-packages
minigrid`` (the curriculum's own defaults: success >= 0.9 over 100 episodes moves it on), and ``--env
MiniGrid-DoorKey-16x16-v0 --env-packages minigrid`` alone; the order alternates per seed so that a drift of the
machine falls on both. Each run's final weights then play ``--episodes`` episodes of DoorKey-16x16 on a fresh env
(actions sampled, as ``daskrl enjoy`` plays them), and the success rate is the share of those with a positive
return (MiniGrid's goal reward). Prints a row per seed and arm, with the task the curriculum reached and when it
moved on, and with ``--json`` one JSON object last. Nothing else may run meanwhile (2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from common import stop_if_signalled

import daskrl
from daskrl.config import Config
from daskrl.envs import make_env
from daskrl.evaluation.episodes import run_episodes
from daskrl.evaluation.loading import experiment_spaces, load_state, policy_model, read_config

HARD = "MiniGrid-DoorKey-16x16-v0"
CURRICULUM = {"env": "MiniGrid-DoorKey-5x5-v0", "curriculum": ["MiniGrid-DoorKey-8x8-v0", HARD]}
ALONE = {"env": HARD}
ARMS = {"curriculum": CURRICULUM, "16x16 alone": ALONE}


def success_on_hard(experiment_dir: str, episodes: int) -> float:
    """The share of ``episodes`` DoorKey-16x16 episodes the experiment's final weights win."""
    config = read_config(experiment_dir)
    spaces = experiment_spaces(config)
    model = policy_model(config, spaces, load_state(experiment_dir, config, "latest")["model"])
    env = make_env(HARD, seed=10_000)
    try:
        returns, _ = run_episodes(env, model, episodes, deterministic=False)
    finally:
        env.close()
    return sum(r > 0 for r in returns) / len(returns)


def one_run(root: str, arm: str, seed: int, steps: int, episodes: int) -> dict:
    config = Config.from_flat({**ARMS[arm], "env_packages": ["minigrid"], "seed": seed, "train_for_env_steps": steps,
                               "train_dir": root, "dashboard_address": "",
                               "experiment": f"{arm.replace(' ', '_')}_{seed}"})
    summary = daskrl.train(config)
    stop_if_signalled(summary)
    progress = summary.get("curriculum") or {}
    return {"seed": seed, "arm": arm, "env_steps": summary["env_steps"], "mean_fps": round(summary["mean_fps"]),
            "success_16x16": success_on_hard(summary["experiment_dir"], episodes),
            "task_reached": progress.get("level"), "moved_on_at": [p["env_steps"] for p in progress.get("passed", [])]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for seed in args.seeds:
            order = list(ARMS) if seed % 2 == 0 else list(reversed(ARMS))
            for arm in order:
                row = one_run(root, arm, seed, args.steps, args.episodes)
                rows.append(row)
                print(f"seed {seed} | {arm:12s} | {row['env_steps']:,} env steps at {row['mean_fps']:,} frames/s | "
                      f"success on 16x16 {row['success_16x16']:.2f}"
                      + (f" | reached task {row['task_reached']}, moved on at {row['moved_on_at']}"
                         if row["task_reached"] is not None else ""), flush=True)
    medians = {arm: statistics.median(r["success_16x16"] for r in rows if r["arm"] == arm) for arm in ARMS}
    print(" | ".join(f"median success on 16x16, {arm}: {value:.2f}" for arm, value in medians.items()))
    if args.json:
        print(json.dumps({"steps": args.steps, "episodes": args.episodes, "rows": rows, "median_success": medians}))


if __name__ == "__main__":
    main()
