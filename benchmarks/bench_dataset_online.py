"""How much sooner SAC reaches its final return when it trains beside a medium-replay dataset (``--dataset``, half of
every minibatch from it: RLPD's symmetric sampling) than from scratch, in env steps.

Run:  python benchmarks/bench_dataset_online.py [--json] [--env Pendulum-v1] [--steps 15000] [--seeds 0 1 2]
      [--eval-every 1000]

Per seed, as a user would with daskrl's defaults for ``--algo sac`` and the env:

1. **from scratch**: ``--seed S --train-for-env-steps STEPS --eval-interval-env-steps E --record-dataset ...``; its
   final return is the mean of its last three evaluations (10 deterministic episodes each), and the dataset keeps
   every whole episode it sampled, in the order they ended.
2. **the medium-replay dataset**: those episodes up to the first where the mean return of the last ten reached a
   third of the way from the first ten's (a random policy's) to the final return, copied into a dataset of their
   own: what an SAC run sampled until it was a third of the way there (D4RL's "medium-replay" recipe).
3. **with the dataset**: the same command with ``--dataset minari:<that dataset>`` and ``--seed S + 100`` (other
   first states and draws than the run that made the dataset), stopped at the first evaluation that reaches the
   from-scratch run's final return, or at STEPS.

Prints a row per seed (the env steps each run took to reach that return, their ratio) and the median ratio, and with
``--json`` one JSON object last. A ratio measures env steps, not time; still, nothing else should run meanwhile
(2 cores: a run's learner and samplers share them).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import tempfile
import warnings

from common import stop_if_signalled

import daskrl
from daskrl import Observer
from daskrl.config import Config

#: evaluations averaged for a run's final return
FINAL_EVALS = 3
#: episodes in the moving mean that decides where the medium-replay dataset ends
WINDOW = 10


class StopAtEvalReturn(Observer):
    """Stops the run at the first evaluation whose mean return reaches ``target``."""

    def __init__(self, target: float) -> None:
        self.target = target

    def on_report(self, run, row) -> None:
        value = row.get("eval_return_mean", math.nan)
        if not math.isnan(value) and value >= self.target:
            run.request_stop(f"an evaluation reached {self.target:.1f}")


def evaluations(root: str, name: str) -> list[tuple[int, float]]:
    """(env steps, mean return) of each evaluation of the run, from its metrics.csv."""
    with open(os.path.join(root, name, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    return [(int(float(r["eval_env_steps"])), float(r["eval_return_mean"])) for r in rows
            if r.get("eval_return_mean") not in (None, "", "nan")]


def first_reaching(evals: list[tuple[int, float]], target: float) -> int | None:
    return next((steps for steps, value in evals if value >= target), None)


def sac_run(root: str, name: str, env: str, seed: int, steps: int, eval_every: int, observers=(), **extra) -> dict:
    config = Config.from_flat({"env": env, "algo": "sac", "seed": seed, "train_for_env_steps": steps,
                               "eval_interval_env_steps": eval_every, "train_dir": root, "dashboard_address": "",
                               "experiment": name, **extra})
    summary = daskrl.train(config, observers=list(observers))
    stop_if_signalled(summary)
    return summary


def medium_replay(source_id: str, target_id: str, final: float) -> dict:
    """Copy the episodes of ``source_id`` up to the one where the moving mean return (:data:`WINDOW` episodes)
    first reached a third of the way from the first episodes' mean to ``final`` into ``target_id``."""
    import minari
    import numpy as np
    from minari.data_collector import EpisodeBuffer

    source = minari.load_dataset(source_id)
    episodes = list(source.iterate_episodes())
    returns = np.array([float(e.rewards.sum()) for e in episodes])
    start = float(returns[:WINDOW].mean())
    third = start + (final - start) / 3
    moving = np.convolve(returns, np.ones(WINDOW) / WINDOW, mode="valid")
    reached = np.flatnonzero(moving >= third)
    count = int(reached[0]) + WINDOW if reached.size else len(episodes)
    buffers = [EpisodeBuffer(observations=e.observations, actions=e.actions, rewards=e.rewards,
                             terminations=e.terminations, truncations=e.truncations) for e in episodes[:count]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(target_id, buffers, env=source.spec.env_spec,
                                           observation_space=source.observation_space,
                                           action_space=source.action_space, algorithm_name="daskrl sac",
                                           jpeg_encoding=False)
    return {"episodes": count, "steps": int(sum(len(b.rewards) for b in buffers)), "third": third,
            "start_return": start, "dataset_return": float(returns[:count].mean())}


def measure_seed(root: str, env: str, seed: int, steps: int, eval_every: int) -> dict:
    tag = env.replace("/", "-")
    replay_id, medium_id = f"bench/{tag}/replay-s{seed}-v0", f"bench/{tag}/medium-replay-s{seed}-v0"
    sac_run(root, f"scratch_{seed}", env, seed, steps, eval_every, record_dataset=replay_id)
    scratch = evaluations(root, f"scratch_{seed}")
    final = statistics.fmean(value for _, value in scratch[-FINAL_EVALS:])
    dataset = medium_replay(replay_id, medium_id, final)
    sac_run(root, f"dataset_{seed}", env, seed + 100, steps, eval_every, [StopAtEvalReturn(final)],
            dataset=f"minari:{medium_id}")
    with_dataset = evaluations(root, f"dataset_{seed}")
    scratch_at, dataset_at = first_reaching(scratch, final), first_reaching(with_dataset, final)
    return {"seed": seed, "final_return": final, "scratch_steps": steps, "scratch_reached_at": scratch_at,
            "dataset_reached_at": dataset_at, "dataset": dataset,
            "ratio_to_budget": dataset_at / steps if dataset_at else None,
            "ratio_to_scratch": dataset_at / scratch_at if dataset_at and scratch_at else None,
            "dataset_evals": with_dataset, "scratch_evals": scratch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=15_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-every", type=int, default=1_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="daskrl_bench_dataset_online_") as root:
        os.environ["MINARI_DATASETS_PATH"] = os.path.join(root, "datasets")
        rows = [measure_seed(root, args.env, seed, args.steps, args.eval_every) for seed in args.seeds]
    print("| seed | final return (scratch) | dataset: episodes, steps, mean return | scratch first reached it at "
          "| with the dataset, reached at | ratio to the budget | ratio to scratch's first |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        d = r["dataset"]
        ratio = {k: f"{r[k]:.2f}" if r[k] is not None else "not reached" for k in ("ratio_to_budget",
                                                                                  "ratio_to_scratch")}
        print(f"| {r['seed']} | {r['final_return']:.1f} | {d['episodes']}, {d['steps']:,}, {d['dataset_return']:.1f} "
              f"| {r['scratch_reached_at']} | {r['dataset_reached_at'] or 'not reached'} | "
              f"{ratio['ratio_to_budget']} | {ratio['ratio_to_scratch']} |")
    reached = [r["ratio_to_budget"] if r["ratio_to_budget"] is not None else math.inf for r in rows]
    median = statistics.median(reached)
    print(f"median env steps to the final return, with the dataset / the from-scratch budget: {median:.2f}")
    if args.json:
        print(json.dumps({"bench": "dataset_online", "env": args.env, "steps": args.steps, "seeds": args.seeds,
                          "median_ratio_to_budget": median if math.isfinite(median) else None, "rows": rows}))


if __name__ == "__main__":
    main()
