"""What daskrl learns with its defaults at the published budgets: the tuning tasks and the test tasks of each family
(benchmarks/learning_tasks.py), beside rl-zoo's (or CleanRL's) figure and, with ``--sb3``, Stable-Baselines3.

Run:  python benchmarks/bench_learning.py --json --seeds 0 1 2 3 4                    # APPO's tuning tasks
      python benchmarks/bench_learning.py --algo dqn --sb3 --seeds 0 1 2 3 4          # DQN, SB3's DQN beside it
      python benchmarks/bench_learning.py --split test --seeds 0 1 2                  # the test tasks, once
      python benchmarks/bench_learning.py --envs HalfCheetah-v5 Hopper-v5 --seeds 0   # some tasks
      python benchmarks/bench_learning.py --algo dqn --envs CartPole-v1 --budget 3000 --seeds 0 --eval-episodes 5

Each task trains as a user runs it, ``daskrl train --env ENV [--algo A] --train-for-env-steps BUDGET --seed S`` and
nothing else (the algorithm's and the env family's defaults, printed at start), one run after the other; then
``daskrl enjoy`` evaluates the final policy on 100 episodes (``--eval-episodes``) with the most likely action, as
rl-zoo's benchmark evaluates deterministically. Options after ``--`` go to every run (a tuning experiment; the
published tables use none). With ``--sb3`` each seed also runs SB3's DQN or SAC with rl-zoo's per-env
hyperparameters (``benchmarks/sb3_offpolicy.py``) for the same env steps, so the wall times come from one run on one
machine.

Per task: every seed's evaluation, whether each seed reached the task's line (its threshold, else the share of the
normalized score, else the reference itself), the interquartile mean of the normalized scores (0 at a uniform random
policy's return over 20 episodes, measured here, 1 at the reference) with its 95% bootstrap interval, the median
training return (the last 100 training episodes), wall time from launch and peak summed PSS. MuJoCo needs
``pip install 'daskrl[mujoco]'`` and Box2D ``'daskrl[box2d]'``; a task whose package is missing is listed as skipped.
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

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_train import run_measured  # noqa: E402
from learning_tasks import TASKS, TEST, TUNING, Task, frozen_problem, tasks  # noqa: E402

from daskrl.sweep.results import bootstrap_ci, iqm  # noqa: E402


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
        run = run_measured([sys.executable, "-m", "daskrl", "train", "--env", env, "--train-for-env-steps",
                            str(budget), "--seed", str(seed), "--train-dir", tmp, "--experiment", "bench",
                            "--dashboard-address", "", *extra], timeout=36000)  # SAC on HalfCheetah: hours
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


def sb3_run(algo: str, env: str, budget: int, seed: int, episodes: int) -> dict | None:
    """SB3's DQN, SAC or TD3 with rl-zoo's hyperparameters (benchmarks/sb3_offpolicy.py); None without SB3."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sb3_offpolicy.py")
    run = run_measured([sys.executable, script, algo, env, str(seed), str(budget), str(episodes)], timeout=36000)
    lines = [line for line in run["out"].splitlines() if line.startswith("{")]
    return {**json.loads(lines[-1]), "wall_s": run["wall_s"]} if lines else None


def random_return(env: str, episodes: int = 20) -> float:
    """A uniform random policy's mean return (the 0 of the normalized score)."""
    import gymnasium as gym

    env_ = gym.make(env)
    env_.action_space.seed(0)
    total = 0.0
    for episode in range(episodes):
        env_.reset(seed=episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env_.step(env_.action_space.sample())
            total += float(reward)
            done = terminated or truncated
    env_.close()
    return total / episodes


def task_result(task: Task, budget: int, runs: list[dict], sb3_runs: list[dict | None], random: float) -> dict:
    """One task's row: per seed, the line, the seeds that reached it, the IQM of the normalized scores."""
    evals = [r["eval_return"] for r in runs]
    scores = np.array([task.score(x, random) for x in evals])
    target = task.target(random)
    out = {"split": task.split, "family": task.family, "budget": budget, "reference": task.reference,
           "source": task.source, "random": round(random, 1), "target": round(target, 2),
           "eval": [round(x, 1) for x in evals], "reached": sum(x >= target for x in evals),
           "score_iqm": round(float(iqm(scores)), 3), "score_ci": [round(x, 3) for x in bootstrap_ci(scores)],
           "train_median": round(statistics.median(r["train_return"] for r in runs), 1),
           "wall_s": [round(r["wall_s"], 1) for r in runs], "peak_pss_mb": round(max(r["peak_pss_mb"] for r in runs))}
    if sb3_runs:
        out["sb3"] = sb3_runs
    return out


def row(env: str, r: dict, seeds: int) -> str:
    sb3 = ""
    if "sb3" in r:
        done = [x for x in r["sb3"] if x is not None]
        returns = ", ".join(f"{x['eval_return']:.1f}" for x in done)
        sb3 = (f" {returns} | {statistics.median(x['wall_s'] for x in done):.0f} |" if done
               else " skipped (pip install stable-baselines3) | |")
    return (f"| {env} | {r['split']} | {r['budget']:,} | {r['reference']:g} ({r['source']}) | {r['target']:g} | "
            f"{', '.join(f'{x:.1f}' for x in r['eval'])} | {r['reached']}/{seeds} | {r['score_iqm']:.2f} "
            f"[{r['score_ci'][0]:.2f}, {r['score_ci'][1]:.2f}] | {r['train_median']:.1f} | "
            f"{statistics.median(r['wall_s']):.0f} | {r['peak_pss_mb']:,} |{sb3}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=list(TASKS), default="appo")
    parser.add_argument("--split", choices=(TUNING, TEST, "all"), default=TUNING,
                        help="the tuning tasks (default), the test tasks (run once, with the defaults frozen), or all")
    parser.add_argument("--envs", nargs="+", help="only these tasks (of any split)")
    parser.add_argument("--budget", type=int, default=0, help="env steps per run instead of the task's (0: the "
                        "task's); for a quick check that the benchmark runs")
    parser.add_argument("--sb3", action="store_true",
                        help="dqn, sac, td3: also run SB3's DQN, SAC or TD3 per seed, side by side")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-episodes", type=int, default=100, help="evaluation episodes per run (20 episodes "
                        "of Acrobot moved the mean by +-4)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("extra", nargs="*", help="more options for every run (after --)")
    args = parser.parse_args()
    chosen = tasks(args.algo, None if args.split == "all" or args.envs else args.split, args.envs)
    if any(t.split == TEST for t in chosen) and (problem := frozen_problem(args.algo)):
        sys.exit(f"bench_learning: {problem}")
    results = {}
    print(f"{os.cpu_count()} cores; --algo {args.algo}; seeds {args.seeds}; evaluation: {args.eval_episodes} "
          "episodes, most likely action; options beyond the task's: " + (" ".join(args.extra) or "none") + "\n")
    sb3 = " SB3 eval (per seed) | SB3 wall s |" if args.sb3 else ""
    print(f"| env | split | budget | reference | line per seed | daskrl eval (per seed) | seeds at the line | "
          f"normalized score IQM [95% CI] | training return (median) | wall s | peak PSS MB |{sb3}")
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if args.sb3 else ""))
    for task in chosen:
        if not available(task.env):
            print(f"| {task.env} | skipped: its package is not installed |")
            continue
        budget = args.budget or task.budget
        extra = ([] if args.algo == "appo" else ["--algo", args.algo]) + args.extra
        runs = []
        for seed in args.seeds:
            runs.append(one_run(task.env, budget, seed, extra, args.eval_episodes))
            print(f"  {task.env} seed {seed}: eval {runs[-1]['eval_return']:.1f}, training return "
                  f"{runs[-1]['train_return']:.1f}, {runs[-1]['wall_s']:.0f} s", file=sys.stderr, flush=True)
        sb3_runs = [sb3_run(args.algo, task.env, budget, seed, args.eval_episodes) for seed in args.seeds] \
            if args.sb3 and args.algo != "appo" else []
        results[task.env] = task_result(task, budget, runs, sb3_runs, random_return(task.env))
        print(row(task.env, results[task.env], len(args.seeds)), flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
