"""What daskrl learns at rl-zoo's PPO step budgets, beside rl-zoo's published returns (DLR-RM/rl-baselines3-zoo).

Run:  python benchmarks/bench_learning.py [--json] [--seeds 0 1 2] [--envs Acrobot-v1 Pendulum-v1 ...]

Each env trains as a user runs it, ``daskrl train --env ENV --train-for-env-steps BUDGET --seed S`` with the
defaults (the env family's included), one run after the other; then ``daskrl enjoy`` evaluates the final policy on
100 episodes (``--eval-episodes``) with the most likely action, as rl-zoo's benchmark evaluates deterministically.
The table shows the median over seeds of the evaluation return and of the training return (the mean of the last 100
training episodes), the wall time from launch, and the peak summed PSS of the run's processes. MuJoCo
needs ``pip install 'daskrl[mujoco]'`` and LunarLander ``'daskrl[box2d]'``; an env whose package is missing is listed
as skipped.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from bench_train import run_measured  # noqa: E402

#: env -> (step budget, rl-zoo's published PPO return at that budget, the env version rl-zoo measured)
RL_ZOO_PPO = {
    "Acrobot-v1": (1_000_000, -73.5, "v1"),
    "MountainCar-v0": (1_000_000, -110.4, "v0"),
    "Pendulum-v1": (100_000, -172.0, "v1"),
    "LunarLander-v3": (1_000_000, 242.0, "v2"),
    "HalfCheetah-v5": (1_000_000, 5819.0, "v3"),
    "Hopper-v5": (1_000_000, 2410.0, "v3"),
    "Ant-v5": (1_000_000, 1327.0, "v3"),
    "Swimmer-v5": (1_000_000, 281.6, "v3"),
}
#: the share of rl-zoo's return to reach: all of it, 80% on MuJoCo (the learning issue's targets)
TARGET_SHARE = {"HalfCheetah-v5": 0.8, "Hopper-v5": 0.8, "Ant-v5": 0.8, "Swimmer-v5": 0.8}


def available(env: str) -> bool:
    import gymnasium as gym

    try:
        gym.make(env).close()
        return True
    except Exception:  # the env's package (mujoco, box2d) is not installed
        return False


def one_run(env: str, budget: int, seed: int, extra: list[str], episodes: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="daskrl_learning_")
    try:
        run = run_measured([sys.executable, "-m", "daskrl.cli", "train", "--env", env, "--train-for-env-steps",
                            str(budget), "--seed", str(seed), "--train-dir", tmp, "--experiment", "bench",
                            "--dashboard-address", "", *extra], timeout=3600)
        with open(os.path.join(tmp, "bench", "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        enjoy = subprocess.run([sys.executable, "-m", "daskrl.cli", "enjoy", "--experiment", "bench", "--train-dir",
                                tmp, "--episodes", str(episodes), "--deterministic", "--seed", str(1000 + seed)],
                               capture_output=True, text=True, timeout=1800)
        evaluation = float(enjoy.stdout.split("return ")[1].split(" ")[0]) if enjoy.returncode == 0 else float("nan")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    last = rows[-1]
    return {"eval_return": evaluation, "train_return": float(last["episode_return_mean"] or "nan"),
            "env_steps": int(last["env_steps"]), "wall_s": run["wall_s"], "peak_pss_mb": run["peak_pss_mb"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(RL_ZOO_PPO), choices=list(RL_ZOO_PPO))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-episodes", type=int, default=100, help="evaluation episodes per run (20 episodes "
                        "of Acrobot moved the mean by +-4)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("extra", nargs="*", help="more options for every run (after --)")
    args = parser.parse_args()
    results = {}
    print(f"{os.cpu_count()} cores; seeds {args.seeds}; evaluation: {args.eval_episodes} episodes, most likely action\n")
    print("| env | budget | rl-zoo PPO | daskrl eval (median) | per seed | daskrl training return | vs rl-zoo | "
          "wall s | peak PSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for env in args.envs:
        budget, zoo, zoo_version = RL_ZOO_PPO[env]
        if not available(env):
            print(f"| {env} | skipped: its package is not installed |")
            continue
        runs = [one_run(env, budget, seed, args.extra, args.eval_episodes) for seed in args.seeds]
        evals = [r["eval_return"] for r in runs]
        median = statistics.median(evals)
        share = TARGET_SHARE.get(env, 1.0)
        met = median >= zoo * share if zoo >= 0 else median >= zoo / share
        results[env] = {"budget": budget, "rl_zoo": zoo, "rl_zoo_env": zoo_version, "eval_median": round(median, 1),
                        "eval": [round(x, 1) for x in evals],
                        "train": [round(r["train_return"], 1) for r in runs], "target_met": met,
                        "wall_s": [round(r["wall_s"], 1) for r in runs],
                        "peak_pss_mb": round(max(r["peak_pss_mb"] for r in runs))}
        print(f"| {env} | {budget:,} | {zoo:g} ({zoo_version}) | {median:.1f} | {', '.join(f'{x:.1f}' for x in evals)}"
              f" | {statistics.median(r['train_return'] for r in runs):.1f} | "
              f"{'met' if met else 'not met'}{'' if share == 1 else f' ({share:.0%} target)'} | "
              f"{statistics.median(r['wall_s'] for r in runs):.0f} | {results[env]['peak_pss_mb']:,} |", flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
