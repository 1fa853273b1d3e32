"""What ``--record-schedule`` costs an asynchronous run, what its schedule weighs, and what replaying it takes.

Run:  python benchmarks/bench_record_schedule.py [--json] [--steps 200000] [--seeds 0 1 2 3 4]
      python benchmarks/bench_record_schedule.py --env atari/Breakout --steps 200000 --seeds 0

``--env`` (CartPole-v1 by default) with ``--seed S --train-for-env-steps STEPS`` (the rest daskrl's defaults for the
env: asynchronous, the embedded cluster), once plain and once with ``--record-schedule``, the order alternating per
seed so that a drift of the machine falls on both. Each run's rate is the summary's mean frames/s (env steps over
the run's time, start-up excluded, the same for both). Then each recorded run is replayed (``daskrl replay``, in one
worker process) and the replay's wall time, start-up included, is set against the recorded run's training time; the
replay's verdict must be "the same weights". Prints a row per seed, the median ratios, the schedule's bytes per
slot, and with ``--json`` one JSON object last. Nothing else may run meanwhile (2 cores).
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
from daskrl.rerun import replay_experiment


def one_run(root: str, env: str, seed: int, steps: int, record: bool) -> dict:
    config = Config.from_flat({"env": env, "record_schedule": record, "seed": seed,
                               "train_for_env_steps": steps, "train_dir": root, "dashboard_address": "",
                               "experiment": f"{'recorded' if record else 'plain'}_{seed}"})
    summary = daskrl.train(config)
    stop_if_signalled(summary)
    return summary


def schedule_size(experiment_dir: str) -> tuple[int, int, int]:
    """(bytes of fills.jsonl and steps.jsonl, slots filled, training steps) of a recorded run."""
    directory = os.path.join(experiment_dir, "schedule")
    size = sum(os.path.getsize(os.path.join(directory, name)) for name in ("fills.jsonl", "steps.jsonl"))
    with open(os.path.join(directory, "fills.jsonl")) as f:
        slots = sum(len(json.loads(line)["entries"]) for line in f)
    with open(os.path.join(directory, "steps.jsonl")) as f:
        steps = sum(1 for _ in f)
    return size, slots, steps


def measure_seed(root: str, env: str, seed: int, steps: int) -> dict:
    order = (False, True) if seed % 2 == 0 else (True, False)
    runs = {record: one_run(root, env, seed, steps, record) for record in order}
    plain, recorded = runs[False], runs[True]
    size, slots, train_steps = schedule_size(recorded["experiment_dir"])
    t0 = time.monotonic()
    verdict = replay_experiment(recorded["experiment_dir"], say=lambda line: None)
    replay_s = time.monotonic() - t0
    run_s = recorded["env_steps"] / recorded["mean_fps"]
    return {"seed": seed, "plain_fps": plain["mean_fps"], "recorded_fps": recorded["mean_fps"],
            "ratio": recorded["mean_fps"] / plain["mean_fps"], "schedule_bytes": size, "slots": slots,
            "train_steps": train_steps, "bytes_per_slot": size / max(slots, 1), "run_s": run_s,
            "replay_s": replay_s, "replay_over_run": replay_s / run_s, "replayed_steps": verdict.steps,
            "same_weights": verdict.same_as_run, "same_metrics": verdict.metrics_differ_at is None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="daskrl_bench_record_") as root:
        rows = [measure_seed(root, args.env, seed, args.steps) for seed in args.seeds]
    print("| seed | plain frames/s | --record-schedule frames/s | ratio | schedule bytes per slot | run s | replay s "
          "(start-up included) | replay / run | replay: same weights, same metrics |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['plain_fps']:,.0f} | {r['recorded_fps']:,.0f} | {r['ratio']:.3f} | "
              f"{r['bytes_per_slot']:.0f} | {r['run_s']:.1f} | {r['replay_s']:.1f} | {r['replay_over_run']:.2f} | "
              f"{r['same_weights']}, {r['same_metrics']} ({r['replayed_steps']} steps) |")
    ratio = statistics.median(r["ratio"] for r in rows)
    replay = statistics.median(r["replay_over_run"] for r in rows)
    print(f"median frames/s ratio (recorded / plain): {ratio:.3f}; median replay / run time: {replay:.2f}")
    if args.json:
        print(json.dumps({"bench": "record_schedule", "env": args.env, "steps": args.steps, "seeds": args.seeds,
                          "median_ratio": round(ratio, 4), "median_replay_over_run": round(replay, 3),
                          "rows": rows}))


if __name__ == "__main__":
    main()
