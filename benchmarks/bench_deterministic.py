"""What ``--deterministic`` costs a ``--sync`` run: frames/s with and without it, side by side in one run.

Run:  python benchmarks/bench_deterministic.py [--json] [--steps 200000] [--seeds 0 1 2]

CartPole-v1 with ``--sync --seed S --train-for-env-steps STEPS`` (the rest daskrl's defaults, the embedded
cluster), once plain and once with ``--deterministic``, alternating per seed so that a drift of the machine falls on
both. Each run's rate is the summary's mean frames/s (env steps over the run's time, start-up excluded, the same
for both). Prints a row per seed, the median ratio (deterministic over plain), and with ``--json`` one JSON object
last. Nothing else may run meanwhile (2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from common import stop_if_signalled

import daskrl
from daskrl.config import Config


def one_run(root: str, seed: int, steps: int, deterministic: bool) -> dict:
    config = Config.from_flat({"env": "CartPole-v1", "sync": True, "deterministic": deterministic, "seed": seed,
                               "train_for_env_steps": steps, "train_dir": root, "dashboard_address": "",
                               "experiment": f"{'det' if deterministic else 'plain'}_{seed}"})
    summary = daskrl.train(config)
    stop_if_signalled(summary)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="daskrl_bench_det_") as root:
        for seed in args.seeds:
            plain, det = (one_run(root, seed, args.steps, flag) for flag in (False, True))
            rows.append({"seed": seed, "plain_fps": plain["mean_fps"], "deterministic_fps": det["mean_fps"],
                         "ratio": det["mean_fps"] / plain["mean_fps"], "plain_steps": plain["env_steps"],
                         "deterministic_steps": det["env_steps"]})
    print("| seed | --sync frames/s | --sync --deterministic frames/s | ratio | env steps (plain, deterministic) |")
    print("|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['plain_fps']:,.0f} | {r['deterministic_fps']:,.0f} | {r['ratio']:.2f} | "
              f"{r['plain_steps']:,}, {r['deterministic_steps']:,} |")
    median = statistics.median(r["ratio"] for r in rows)
    print(f"median ratio (deterministic / plain): {median:.2f}")
    if args.json:
        print(json.dumps({"bench": "deterministic", "steps": args.steps, "seeds": args.seeds,
                          "median_ratio": round(median, 3), "rows": rows}))


if __name__ == "__main__":
    main()
