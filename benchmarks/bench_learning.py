"""What daskrl learns at rl-zoo's step budgets, beside rl-zoo's published returns (DLR-RM/rl-baselines3-zoo).

Run:  python benchmarks/bench_learning.py [--algo appo|dqn|sac] [--json] [--seeds 0 1 2] [--envs Acrobot-v1 ...]
      python benchmarks/bench_learning.py --algo dqn --sb3      # + SB3's DQN at the same budgets, side by side
      python benchmarks/bench_learning.py --algo sac --envs HalfCheetah-v5 --budget 200000 --seeds 0 --sb3
      python benchmarks/bench_learning.py --algo dqn --budget 3000 --seeds 0 --eval-episodes 5   # a quick check

``--algo appo`` compares with rl-zoo's PPO, ``--algo dqn`` and ``--algo sac`` with rl-zoo's DQN and SAC: daskrl runs
with rl-zoo's hyperparameters translated to its options (learning rate, minibatch, buffer, learning starts, gamma,
the update-to-data ratio of train_freq and gradient_steps, DQN's target updates in updates and exploration, a
256x256 ReLU network, raw observations for DQN) and its own DQN otherwise (double Q, dueling heads, 3-step returns,
prioritized replay); SAC runs with 1-step returns and uniform replay, as SB3's. With ``--sb3`` each seed also runs
SB3's DQN or SAC (``benchmarks/sb3_offpolicy.py``, rl-zoo's hyperparameters) for the same env steps and gradient
steps, so both wall times come from one run on one machine (``--budget`` applies to both: HalfCheetah's 1M steps
side by side).

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
#: env -> (step budget, rl-zoo's published DQN return, the env version rl-zoo measured)
RL_ZOO_DQN = {
    "CartPole-v1": (50_000, 500.0, "v1"),
    "MountainCar-v0": (120_000, -100.8, "v0"),
    "LunarLander-v3": (100_000, 154.0, "v2"),
}
#: rl-zoo's dqn.yml as daskrl options: replay_ratio = gradient_steps / train_freq; rl-zoo counts target updates in
#: env steps (CartPole's 10 fall inside each 256-step collection, so its target is refreshed once per 128-update
#: round); 8 envs x 16 steps per slot on one rollout worker; raw observations (rl-zoo's dqn.yml normalizes none, and
#: daskrl's running statistics with their +-5 std clip hid MountainCar's flag: docs/offpolicy.md)
_DQN_COMMON = ["--algo", "dqn", "--num-workers", "1", "--num-envs-per-worker", "8", "--rollout", "16",
               "--hidden-sizes", "256", "256", "--activation", "relu", "--max-grad-norm", "10", "--no-normalize-obs"]
DQN_OPTIONS = {
    "CartPole-v1": ["--learning-rate", "2.3e-3", "--batch-size", "64", "--replay-capacity", "100000",
                    "--learning-starts", "1000", "--gamma", "0.99", "--target-update-interval", "128",
                    "--replay-ratio", "0.5", "--exploration-fraction", "0.16", "--exploration-eps", "0.04"],
    "MountainCar-v0": ["--learning-rate", "4e-3", "--batch-size", "128", "--replay-capacity", "10000",
                       "--learning-starts", "1000", "--gamma", "0.98", "--target-update-interval", "300",
                       "--replay-ratio", "0.5", "--exploration-fraction", "0.2", "--exploration-eps", "0.07"],
    "LunarLander-v3": ["--learning-rate", "6.3e-4", "--batch-size", "128", "--replay-capacity", "50000",
                       "--learning-starts", "128", "--gamma", "0.99", "--target-update-interval", "250",
                       "--replay-ratio", "1.0", "--exploration-fraction", "0.12", "--exploration-eps", "0.1"],
}
#: env -> (step budget, rl-zoo's published SAC return, the env version rl-zoo measured)
RL_ZOO_SAC = {
    "Pendulum-v1": (20_000, -157.0, "v1"),
    "HalfCheetah-v5": (1_000_000, 9535.0, "v3"),
}
#: rl-zoo's sac.yml (SB3's defaults: batch 256, tau 0.005, gamma 0.99, one update per env step, [256, 256])
_SAC_COMMON = ["--algo", "sac", "--num-workers", "1", "--num-envs-per-worker", "4", "--rollout", "16",
               "--hidden-sizes", "256", "256", "--activation", "relu", "--batch-size", "256", "--gamma", "0.99",
               "--replay-ratio", "1", "--n-step", "1", "--no-prioritized-replay", "--max-grad-norm", "0",
               "--replay-capacity", "1000000", "--target-tau", "0.005"]
SAC_OPTIONS = {
    "Pendulum-v1": ["--learning-rate", "1e-3", "--learning-starts", "100"],
    "HalfCheetah-v5": ["--learning-rate", "3e-4", "--learning-starts", "10000"],
}
BUDGETS = {"appo": RL_ZOO_PPO, "dqn": RL_ZOO_DQN, "sac": RL_ZOO_SAC}
ALGO_OPTIONS = {"appo": lambda env: [], "dqn": lambda env: _DQN_COMMON + DQN_OPTIONS[env],
                "sac": lambda env: _SAC_COMMON + SAC_OPTIONS[env]}
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
    """SB3's DQN or SAC with rl-zoo's hyperparameters (benchmarks/sb3_offpolicy.py); None when SB3 is missing."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sb3_offpolicy.py")
    run = run_measured([sys.executable, script, algo, env, str(seed), str(budget), str(episodes)], timeout=36000)
    lines = [line for line in run["out"].splitlines() if line.startswith("{")]
    return {**json.loads(lines[-1]), "wall_s": run["wall_s"]} if lines else None


def sb3_cell(runs: list[dict | None]) -> str:
    """SB3's median evaluation return and wall time, or why there is none."""
    if not runs or any(r is None for r in runs):
        return "skipped (pip install stable-baselines3) |"
    return (f"{statistics.median(r['eval_return'] for r in runs):.1f} | "
            f"{statistics.median(r['wall_s'] for r in runs):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=list(BUDGETS), default="appo")
    parser.add_argument("--envs", nargs="+", choices=sorted({*RL_ZOO_PPO, *RL_ZOO_DQN, *RL_ZOO_SAC}),
                        help="default: every env of the algorithm's table")
    parser.add_argument("--budget", type=int, default=0, help="env steps per run instead of rl-zoo's (0: rl-zoo's); "
                        "for a quick check that the benchmark runs")
    parser.add_argument("--sb3", action="store_true", help="dqn, sac: also run SB3's DQN or SAC per seed, side by side")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-episodes", type=int, default=100, help="evaluation episodes per run (20 episodes "
                        "of Acrobot moved the mean by +-4)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("extra", nargs="*", help="more options for every run (after --)")
    args = parser.parse_args()
    table = BUDGETS[args.algo]
    results = {}
    print(f"{os.cpu_count()} cores; --algo {args.algo}; seeds {args.seeds}; evaluation: {args.eval_episodes} "
          "episodes, most likely action\n")
    sb3 = " SB3 eval (median) | SB3 wall s |" if args.sb3 else ""
    print(f"| env | budget | rl-zoo {'PPO' if args.algo == 'appo' else args.algo.upper()} | daskrl eval (median) | "
          f"per seed | daskrl training return | vs rl-zoo | wall s | peak PSS MB |{sb3}")
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if args.sb3 else ""))
    for env in args.envs or list(table):
        if env not in table:
            print(f"| {env} | skipped: no rl-zoo {args.algo} budget for it |")
            continue
        budget, zoo, zoo_version = table[env]
        budget = args.budget or budget
        if not available(env):
            print(f"| {env} | skipped: its package is not installed |")
            continue
        extra = ALGO_OPTIONS[args.algo](env) + args.extra
        runs = [one_run(env, budget, seed, extra, args.eval_episodes) for seed in args.seeds]
        sb3_runs = [sb3_run(args.algo, env, budget, seed, args.eval_episodes) for seed in args.seeds] \
            if args.sb3 and args.algo != "appo" else []
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
              f"{statistics.median(r['wall_s'] for r in runs):.0f} | {results[env]['peak_pss_mb']:,} |"
              f"{' ' + sb3_cell(sb3_runs) if args.sb3 else ''}", flush=True)
        if args.sb3:
            results[env]["sb3"] = sb3_runs
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
