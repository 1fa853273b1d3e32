"""What ``--record-dataset`` adds to a training run's time, and what its Minari dataset weighs.

Run:  python benchmarks/bench_record_dataset.py [--json] [--env CartPole-v1] [--algo appo] [--steps 200000]
      [--seeds 0 1 2]
      python benchmarks/bench_record_dataset.py --env Pendulum-v1 --algo sac --steps 20000 --seeds 0 1 2

``--env`` with ``--algo``, ``--seed S --train-for-env-steps STEPS`` (the rest daskrl's defaults for the env), once
plain and once with ``--record-dataset``, the order alternating per seed so that a drift of the machine falls on
both. A run's time is ``daskrl.train``'s whole call, start-up included and, for the recorded run, until every episode
is written (the call returns then); its rate is the summary's mean frames/s. CartPole's first episodes are a few dozen
steps long: the most episodes per env step, the most writing. Prints a row per seed, the median ratios, the
dataset's bytes per step, and with ``--json`` one JSON object last. Nothing else may run meanwhile (2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from common import stop_if_signalled

import daskrl
from daskrl.config import Config


def one_run(root: str, env: str, algo: str, seed: int, steps: int, record: bool) -> tuple[dict, float]:
    """The run's summary and its wall time (the call's, start-up and the dataset's last writes included)."""
    name = f"{'recorded' if record else 'plain'}_{seed}"
    config = Config.from_flat({"env": env, "algo": algo, "seed": seed, "train_for_env_steps": steps,
                               "train_dir": root, "dashboard_address": "", "experiment": name,
                               "record_dataset": f"bench/{env.replace('/', '-')}/{name}-v0" if record else ""})
    t0 = time.monotonic()
    summary = daskrl.train(config)
    wall = time.monotonic() - t0
    stop_if_signalled(summary)
    return summary, wall


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def measure_seed(root: str, env: str, algo: str, seed: int, steps: int) -> dict:
    order = (False, True) if seed % 2 == 0 else (True, False)
    runs = {record: one_run(root, env, algo, seed, steps, record) for record in order}
    (plain, plain_s), (recorded, recorded_s) = runs[False], runs[True]
    dataset = os.path.join(os.environ["MINARI_DATASETS_PATH"], recorded["dataset"])
    return {"seed": seed, "plain_s": plain_s, "recorded_s": recorded_s, "time_ratio": recorded_s / plain_s,
            "plain_fps": plain["mean_fps"], "recorded_fps": recorded["mean_fps"],
            "fps_ratio": recorded["mean_fps"] / plain["mean_fps"], "episodes": recorded["dataset_episodes"],
            "steps": recorded["dataset_steps"], "env_steps": recorded["env_steps"],
            "bytes_per_step": folder_bytes(dataset) / max(recorded["dataset_steps"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--algo", default="appo")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="daskrl_bench_dataset_") as root:
        os.environ["MINARI_DATASETS_PATH"] = os.path.join(root, "datasets")
        rows = [measure_seed(root, args.env, args.algo, seed, args.steps) for seed in args.seeds]
    print("| seed | plain s | --record-dataset s | time ratio | plain frames/s | recorded frames/s | episodes "
          "recorded | steps recorded (of the run's) | bytes per step |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['seed']} | {r['plain_s']:.1f} | {r['recorded_s']:.1f} | {r['time_ratio']:.3f} | "
              f"{r['plain_fps']:,.0f} | {r['recorded_fps']:,.0f} | {r['episodes']:,} | {r['steps']:,} "
              f"({r['env_steps']:,}) | {r['bytes_per_step']:.0f} |")
    time_ratio = statistics.median(r["time_ratio"] for r in rows)
    fps_ratio = statistics.median(r["fps_ratio"] for r in rows)
    print(f"median time ratio (recorded / plain): {time_ratio:.3f}; median frames/s ratio: {fps_ratio:.3f}")
    if args.json:
        print(json.dumps({"bench": "record_dataset", "env": args.env, "algo": args.algo, "steps": args.steps,
                          "seeds": args.seeds, "median_time_ratio": round(time_ratio, 4),
                          "median_fps_ratio": round(fps_ratio, 4), "rows": rows}))


if __name__ == "__main__":
    main()
