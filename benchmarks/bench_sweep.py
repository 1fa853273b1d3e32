"""A sweep against the same trials run one after another: wall time, and whether the sweep picks a good one.

Run:  python benchmarks/bench_sweep.py [--json] [--steps 300000] [--seeds 2]

CartPole-v1, 8 configurations (learning rate x entropy coefficient x epochs) x 2 seeds, ``--steps`` env steps
each. First ``daskrl train`` runs all 16 trials in full, one after the other, each a process of its own, as a
user without sweeps would (Sample Factory's launcher and rl-zoo run one process per experiment); then ``daskrl
sweep`` runs the same 16 with ASHA (3 rungs, reduction 3) on one embedded cluster. Prints both wall times, their
ratio, the configuration the sweep picked and, from the full runs, that configuration's 2-seed mean return against
the best configuration's. Nothing else may run meanwhile (2 cores).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

GRID = {"learning_rate": [1e-4, 1e-3], "entropy_coef": [0.0, 0.03], "num_epochs": [1, 2]}
BASE = {"env": "CartPole-v1", "dashboard_address": ""}


def full_runs(root: str, steps: int, seeds: list[int]) -> tuple[float, dict[int, list[float]]]:
    """Every configuration and seed with ``daskrl train``, one after the other: wall seconds, final returns."""
    configs = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    returns: dict[int, list[float]] = {}
    t0 = time.monotonic()
    for index, params in enumerate(configs):
        for seed in seeds:
            name = f"c{index:03d}-s{seed}"
            cmd = [sys.executable, "-m", "daskrl", "train", "--env", BASE["env"], "--dashboard-address", "",
                   "--train-dir", root, "--experiment", name, "--seed", str(seed), "--train-for-env-steps", str(steps),
                   *[a for k, v in params.items() for a in (f"--{k.replace('_', '-')}", str(v))]]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            returns.setdefault(index, []).append(final_return(os.path.join(root, name)))
    return time.monotonic() - t0, returns


def final_return(experiment_dir: str) -> float:
    with open(os.path.join(experiment_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["episode_return_mean"])


def sweep_run(root: str, steps: int, seeds: list[int]) -> tuple[float, dict]:
    spec = {"name": "bench", "base": BASE, "space": GRID, "search": "grid", "seeds": seeds, "budget_env_steps": steps,
            "early_stopping": "asha", "rungs": 3, "reduction": 3}
    path = os.path.join(root, "bench.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "daskrl.cli", "sweep", path, "--train-dir", root], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    from daskrl.sweep.results import best, rank
    from daskrl.sweep.trials import read_table

    rows = read_table(os.path.join(root, "bench"))
    chosen = best(rows)
    statuses = {s: sum(r["status"] == s for r in rows) for s in {r["status"] for r in rows}}
    return wall, {"picked": chosen.configuration if chosen else None, "statuses": statuses,
                  "env_steps": sum(r["env_steps"] for r in rows), "ranked": [r.configuration for r in rank(rows)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as full_root, tempfile.TemporaryDirectory() as sweep_root:
        full_wall, returns = full_runs(full_root, args.steps, args.seeds)
        sweep_wall, picked = sweep_run(sweep_root, args.steps, args.seeds)
    means = {c: sum(r) / len(r) for c, r in returns.items()}
    best_config = max(means, key=means.get)
    chosen = picked["picked"]
    ratio = means[chosen] / means[best_config] if chosen is not None and means[best_config] else float("nan")
    total = len(returns) * len(args.seeds) * args.steps
    print(f"16 trials one after another (daskrl train): {full_wall:.1f} s, {total:,} env steps")
    print(f"the same as one sweep with ASHA:            {sweep_wall:.1f} s, {picked['env_steps']:,} env steps "
          f"({picked['statuses']})")
    print(f"wall-time ratio sweep / one after another: {sweep_wall / full_wall:.3f} (goal: <= 0.5)")
    print("full runs' 2-seed mean return per configuration: "
          + ", ".join(f"c{c:03d} {m:.1f}" for c, m in sorted(means.items())))
    print(f"sweep picked c{chosen:03d}: {means[chosen]:.1f} in the full runs, best c{best_config:03d} "
          f"{means[best_config]:.1f}: ratio {ratio:.3f} (goal: >= 0.95)" if chosen is not None else "sweep picked none")
    if args.json:
        print(json.dumps({"bench": "sweep", "steps": args.steps, "seeds": args.seeds, "full_wall_s": round(full_wall, 2),
                          "sweep_wall_s": round(sweep_wall, 2), "wall_ratio": round(sweep_wall / full_wall, 4),
                          "picked": chosen, "best": best_config, "picked_return_ratio": round(ratio, 4),
                          "full_means": {str(c): round(m, 2) for c, m in means.items()},
                          "sweep_statuses": picked["statuses"], "sweep_env_steps": picked["env_steps"]}))


if __name__ == "__main__":
    main()
