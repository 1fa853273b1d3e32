"""The offline algorithms (``--algo bc|iql|cql``) on a recorded dataset, beside d3rlpy's same algorithms on the same
dataset, networks, minibatches and rates: the normalized score each reaches and the learner updates a second each
makes.

Run:  python benchmarks/bench_offline.py --dataset me/pendulum/expert-v0 [--env Pendulum-v1] [--algos bc iql cql]
      [--seeds 1 2 3] [--updates 20000] [--episodes 20] [--d3rlpy-venv VENV] [--json]

The dataset is one `daskrl record` wrote (docs/offline.md shows the commands). Per algorithm and seed:

1. **daskrl**: ``daskrl.train`` with ``--env ENV --algo A --dataset minari:ID --train-for-updates N --seed S`` and
   nothing else (the algorithm's defaults), then ``enjoy`` with ``--episodes E --deterministic``; its updates a
   second are read off the rows between the first row with an update and the last (start-up left out).
2. **d3rlpy** (with ``--d3rlpy-venv``, a venv holding ``torch==2.13.0 d3rlpy==2.8.1``: d3rlpy pins gymnasium 1.0.0):
   ``benchmarks/d3rlpy_offline.py`` on the same transitions (exported once to an .npz), N updates of ``fit``, then E
   deterministic episodes; its updates a second are ``fit``'s.

Scores are normalized as D4RL's: (return - random) / (dataset - random), where ``dataset`` is the mean return of the
dataset's episodes (the policy that recorded it) and ``random`` that of E uniformly random episodes. Runs one after the
other: nothing else should run meanwhile (2 cores). Prints a row per run, the medians per algorithm and framework,
and with ``--json`` one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile

import gymnasium as gym
import numpy as np
from common import stop_if_signalled

import daskrl
from daskrl.config import Config
from daskrl.evaluation.episodes import enjoy

HERE = os.path.dirname(os.path.abspath(__file__))


def dataset_transitions(dataset_id: str) -> tuple[dict[str, np.ndarray], float]:
    """Every step of the dataset as d3rlpy's MDPDataset takes them, and the mean return of its episodes."""
    import minari

    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("observations", "actions", "rewards", "terminals",
                                                          "timeouts")}
    returns = []
    for episode in minari.load_dataset(dataset_id).iterate_episodes():
        parts["observations"].append(np.asarray(episode.observations[:-1], np.float32))
        parts["actions"].append(np.asarray(episode.actions, np.float32))
        parts["rewards"].append(np.asarray(episode.rewards, np.float32))
        parts["terminals"].append(np.asarray(episode.terminations, np.float32))
        timeouts = np.asarray(episode.truncations, np.float32)
        timeouts[-1] = 1.0 - parts["terminals"][-1][-1]  # every episode ends: d3rlpy cuts episodes at either flag
        parts["timeouts"].append(timeouts)
        returns.append(float(np.sum(episode.rewards)))
    return {k: np.concatenate(v) for k, v in parts.items()}, float(np.mean(returns))


def random_return(env_id: str, episodes: int) -> float:
    env = gym.make(env_id)
    env.action_space.seed(0)
    totals = []
    for episode in range(episodes):
        env.reset(seed=12345 + episode)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        totals.append(total)
    return float(np.mean(totals))


def updates_per_second(rows: list[dict]) -> float:
    """Updates a second between the first row with an update and the last (the start-up left out)."""
    trained = [row for row in rows if row.get("learner_updates", 0) > 0]
    if len(trained) < 2 or trained[-1]["time_s"] <= trained[0]["time_s"]:
        return math.nan
    return (trained[-1]["learner_updates"] - trained[0]["learner_updates"]) / (trained[-1]["time_s"]
                                                                               - trained[0]["time_s"])


def run_daskrl(args: argparse.Namespace, algo: str, seed: int, root: str) -> dict:
    rows: list[dict] = []
    summary = daskrl.train(Config.from_flat({
        "env": args.env, "algo": algo, "dataset": f"minari:{args.dataset}", "train_for_updates": args.updates,
        "seed": seed, "train_dir": root, "experiment": f"{algo}_{seed}", "dashboard_address": ""}),
        on_report=rows.append)
    stop_if_signalled(summary)
    played = enjoy(summary["experiment_dir"], episodes=args.episodes, deterministic=True)
    return {"return_mean": played["return_mean"], "updates": summary["learner_updates"],
            "updates_per_s": updates_per_second(rows)}


def run_d3rlpy(args: argparse.Namespace, algo: str, seed: int, data_path: str) -> dict:
    python = os.path.join(args.d3rlpy_venv, "bin", "python")
    done = subprocess.run([python, os.path.join(HERE, "d3rlpy_offline.py"), data_path, algo, str(seed),
                           str(args.updates), str(args.episodes), args.env], capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(data_path))  # d3rlpy writes d3rlpy_logs/ where it runs
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="a Minari dataset id recorded on --env")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--algos", nargs="+", default=["bc", "iql", "cql"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--d3rlpy-venv", default="", help="a venv with torch==2.13.0 d3rlpy==2.8.1 (else: daskrl only)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data, dataset_return = dataset_transitions(args.dataset)
    random = random_return(args.env, args.episodes)
    score = lambda ret: (ret - random) / (dataset_return - random)  # noqa: E731
    print(f"dataset {args.dataset}: {len(data['rewards']):,} steps, mean episode return {dataset_return:.1f}; "
          f"random policy {random:.1f}")
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_offline_") as root:
        data_path = os.path.join(root, "dataset.npz")
        np.savez(data_path, **data)
        frameworks = ["daskrl", "d3rlpy"] if args.d3rlpy_venv else ["daskrl"]
        for algo in args.algos:
            for seed in args.seeds:
                for framework in frameworks:
                    run = run_daskrl(args, algo, seed, root) if framework == "daskrl" else \
                        run_d3rlpy(args, algo, seed, data_path)
                    out = {"framework": framework, "algo": algo, "seed": seed, **run}
                    out["score"] = score(out["return_mean"])
                    results.append(out)
                    print(f"{framework:7} {algo:4} seed {seed}: return {out['return_mean']:8.1f}  normalized "
                          f"{out['score']:.3f}  {out['updates_per_s']:6.1f} updates/s")
    medians = {}
    for algo in args.algos:
        for framework in ("daskrl", "d3rlpy"):
            mine = [r for r in results if r["algo"] == algo and r["framework"] == framework]
            if mine:
                medians[f"{framework}/{algo}"] = {
                    "score": statistics.median(r["score"] for r in mine),
                    "updates_per_s": statistics.median(r["updates_per_s"] for r in mine)}
                print(f"median {framework:7} {algo:4}: normalized {medians[f'{framework}/{algo}']['score']:.3f}, "
                      f"{medians[f'{framework}/{algo}']['updates_per_s']:.1f} updates/s")
    if args.json:
        print(json.dumps({"dataset": args.dataset, "env": args.env, "updates": args.updates,
                          "dataset_return": dataset_return, "random_return": random, "runs": results,
                          "medians": medians}))


if __name__ == "__main__":
    main()
