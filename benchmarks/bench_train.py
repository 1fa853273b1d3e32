"""Time to solve CartPole-v1 (mean return >= 475 over the last 100 episodes) from launch, daskrl vs SB3.

Run:  python benchmarks/bench_train.py [--json] [--seeds 0 1 2] [--env-backend gymnasium envpool jax]
      python benchmarks/bench_train.py --task cartpole_no_velocity [--limit 300]

``--task cartpole_no_velocity``: CartPole without its velocities (examples/cartpole_no_velocity.py), which needs
memory: daskrl with ``--rnn lstm`` (otherwise the global defaults, as the example runs) against sb3-contrib's
RecurrentPPO with rl-zoo's settings (benchmarks/sb3_recurrent_cartpole.py), each in a process of its own, side by
side.

daskrl: `daskrl train --env CartPole-v1 --stop-at-return 475` with default options, one subprocess per seed,
timed from launch until it reports the threshold; with ``--env-backend gymnasium envpool``, once per backend, seed
by seed in turn, each with the machine's bound for its backend (bench_sampling's limit of that backend's stepping
with the learner alone) and the run's share of it. Stable-Baselines3 PPO (rl-zoo hyperparameters) runs the
same way when it is installed. Peak memory is the summed PSS of the whole process tree (driver, scheduler,
forkserver and workers), sampled every 0.2 s. Runs go one after the other, never two at once. Both daskrl trees
have their bytecode written first, as an installed package has (benchmarks/common.py: compile_like_an_install).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import compile_like_an_install, training_fps_bound, tree_pss_mb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def run_measured(cmd: list[str], timeout: float, marker: str | None = None, env: dict | None = None,
                 cwd: str | None = None) -> dict:
    """Run ``cmd``; return its output, wall seconds, peak summed PSS (MB) and, when ``marker`` is given, the
    seconds from launch until the first output line containing it."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                            cwd=cwd)
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_pss_mb(proc.pid))
            time.sleep(0.2)

    killer = threading.Timer(timeout, proc.kill)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    killer.start()
    lines, marked = [], None
    for line in proc.stdout:
        lines.append(line)
        if marker and marked is None and marker in line:
            marked = time.monotonic() - t0
    proc.wait()
    killer.cancel()
    done.set()
    sampler.join()
    return {"out": "".join(lines), "wall_s": time.monotonic() - t0, "peak_pss_mb": peak[0], "marked_s": marked}


def _timed_daskrl(cmd: list[str], tmp: str, limit_s: float, env: dict | None = None) -> dict:
    """Run a daskrl training command that writes experiment ``bench`` under ``tmp``; seconds from launch to 475,
    median training frames/s of its CSV rows, peak memory and wall time."""
    try:
        # run from the scratch directory: `python -m` puts the working directory first on the import path, which
        # would shadow the baseline's source tree with this one when run from a checkout
        run = run_measured(cmd, timeout=limit_s + 60, marker="reached --stop-at-return", env=env, cwd=tmp)
        rows = _csv_rows(os.path.join(tmp, "bench", "metrics.csv"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fps = [float(r["fps"]) for r in rows if float(r["fps"]) > 0]
    return {"seconds_to_475": run["marked_s"], "fps": statistics.median(fps) if fps else 0.0,
            "env_steps": int(rows[-1]["env_steps"]) if rows else None,  # at the stop: where 475 was reached
            "peak_pss_mb": run["peak_pss_mb"], "wall_s": run["wall_s"], **startup_of(run["out"])}


def startup_of(out: str) -> dict:
    """The start-up a daskrl run printed: seconds from launch until its components were ready, each phase's share
    (daskrl/driver/launch/startup.py) and its first training step; empty for a tree that does not print them."""
    ready = re.search(r"daskrl: started in ([\d.]+) s \((.*)\)", out)
    first = re.search(r"first training step ([\d.]+) s after launch", out)
    if ready is None:
        return {}
    phases = {name: float(seconds) for name, seconds in (part.rsplit(" ", 1) for part in ready.group(2).split(", "))}
    return {"ready_s": float(ready.group(1)), "phases_s": phases,
            "first_step_s": float(first.group(1)) if first else None}


def command_module(checkout: str | None) -> str:
    """The module that runs the ``daskrl`` command in a tree: ``daskrl`` (its launcher, daskrl/__main__.py, which starts
    the worker server before anything else) where the tree has one, ``daskrl.cli`` in older trees."""
    root = Path(checkout) if checkout else Path(__file__).resolve().parents[1]
    return "daskrl" if (root / "daskrl" / "__main__.py").exists() else "daskrl.cli"


def daskrl_run(seed: int, limit_s: float, checkout: str | None = None, backend: str = "gymnasium") -> dict:
    """``checkout``: run the daskrl of another source tree (a git worktree of an older commit) instead of this one;
    ``backend``: its --env-backend (the default, gymnasium, is left off the command line)."""
    tmp = tempfile.mkdtemp(prefix="daskrl_bench_")
    env = None if checkout is None else {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    chosen = [] if backend == "gymnasium" else ["--env-backend", backend]
    return _timed_daskrl([sys.executable, "-m", command_module(checkout), "train", "--env", "CartPole-v1",
                          "--stop-at-return", "475", "--train-for-seconds", str(limit_s), "--seed", str(seed),
                          "--train-dir", tmp, "--experiment", "bench", "--dashboard-address", "", *chosen], tmp,
                         limit_s, env)


def daskrl_no_velocity_run(seed: int, limit_s: float) -> dict:
    """The example script, as a user runs it (its launch time counts), with --rnn lstm."""
    tmp = tempfile.mkdtemp(prefix="daskrl_bench_")
    return _timed_daskrl([sys.executable, os.path.join(HERE, "..", "examples", "cartpole_no_velocity.py"), "--rnn",
                          "lstm", "--seed", str(seed), "--seconds", str(limit_s), "--train-dir", tmp, "--experiment",
                          "bench", "--no-enjoy"], tmp, limit_s)


def _csv_rows(path: str) -> list[dict]:
    import csv

    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def median_startup(runs: list[dict]) -> dict:
    """Medians over runs of :func:`startup_of`'s numbers (empty when the runs printed none)."""
    printed = [r for r in runs if r.get("ready_s") is not None]
    if not printed:
        return {}
    firsts = [r["first_step_s"] for r in printed if r.get("first_step_s") is not None]
    return {"ready_s": round(statistics.median(r["ready_s"] for r in printed), 2),
            "phases_s": {phase: round(statistics.median(r["phases_s"].get(phase, 0.0) for r in printed), 2)
                         for phase in printed[0]["phases_s"]},
            "first_step_s": round(statistics.median(firsts), 2) if firsts else None}


def sb3_run(seed: int, limit_s: float, script: str = "sb3_cartpole.py") -> dict | None:
    try:
        import stable_baselines3  # noqa: F401
        if script == "sb3_recurrent_cartpole.py":
            import sb3_contrib  # noqa: F401
    except ImportError:
        return None
    run = run_measured([sys.executable, os.path.join(HERE, script), str(seed)], timeout=limit_s + 60,
                       marker="reached 475")
    line = [x for x in run["out"].strip().splitlines() if x.startswith("{")]
    result = json.loads(line[-1]) if line else {"seconds_to_475": None, "fps": 0.0}
    return {"seconds_to_475": run["marked_s"], "fps": result["fps"], "env_steps": result.get("env_steps"),
            "peak_pss_mb": run["peak_pss_mb"], "wall_s": run["wall_s"]}


def hardware_limits(backends: list[str]) -> dict:
    """What the machine allows a CartPole run, measured the way bench_sampling.py and bench_learner.py do: every core
    stepping envs with random actions (per env backend), and the learner's training step alone (4,096 samples,
    minibatches of 512). The top-level numbers are the first backend's."""
    from bench_learner import Step, measure
    from bench_sampling import limit_fps

    learner = measure(Step.of("mlp", gpu=False), "cpu", 1, 1, 20)
    cores = os.cpu_count() or 1
    by_backend = {}
    for backend in backends:
        env_fps = limit_fps("CartPole-v1", 5.0, 32, backend)
        by_backend[backend] = {"env_fps": round(env_fps),
                               "training_fps_bound": round(training_fps_bound(env_fps, learner, cores))}
    return {**by_backend[backends[0]], "learner_samples_per_s": round(learner), "cores": cores,
            "by_backend": by_backend}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--limit", type=float, default=None, help="give up on a run after this many seconds (default: "
                                                                   "60 for cartpole, 300 for cartpole_no_velocity)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--task", default="cartpole", choices=["cartpole", "cartpole_no_velocity"])
    parser.add_argument("--baseline", default=None, help="cartpole: also run the daskrl of this source tree (e.g. "
                                                         "`git worktree add /tmp/base <commit>`), seed by seed in turn "
                                                         "with this one, and print the frames/s ratio")
    parser.add_argument("--env-backend", nargs="+", default=["gymnasium"], choices=["gymnasium", "envpool", "jax"],
                        help="cartpole: run daskrl with each of these --env-backend values, seed by seed in turn")
    parser.add_argument("--no-limits", action="store_true", help="cartpole: skip measuring the machine's limits (raw "
                                                                  "env stepping, the learner alone) after the runs")
    args = parser.parse_args()
    if args.limit is None:
        args.limit = 60.0 if args.task == "cartpole" else 300.0
    for checkout in (os.path.join(HERE, ".."), args.baseline):  # timed as installed, with their bytecode
        if checkout:
            compile_like_an_install(checkout)
    if args.task == "cartpole":
        systems = {system_name(b): [] for b in args.env_backend}
        systems.update({"daskrl_baseline": []} if args.baseline else {})
        for s in args.seeds:  # in turn, so a drift of the machine's speed hits both alike
            for backend in args.env_backend:
                systems[system_name(backend)].append(daskrl_run(s, args.limit, backend=backend))
            if args.baseline:
                systems["daskrl_baseline"].append(daskrl_run(s, args.limit, args.baseline))
        sb3 = [sb3_run(s, args.limit) for s in args.seeds]
        name, title = "sb3_ppo_rlzoo", "CartPole-v1"
    else:
        systems = {"daskrl_rnn_lstm": [daskrl_no_velocity_run(s, args.limit) for s in args.seeds]}
        sb3 = [sb3_run(s, args.limit, "sb3_recurrent_cartpole.py") for s in args.seeds]
        name, title = "sb3_contrib_recurrent_ppo_rlzoo", "CartPole without velocities (x, theta only)"
    if sb3[0] is not None:
        systems[name] = sb3
    result = {}
    print(f"{title}, time from launch to a mean return >= 475 (last 100 episodes); {os.cpu_count()} cores\n")
    print("| system | seconds to 475 (per seed) | median | env steps at the stop (per seed) | training frames/s | "
          "peak PSS (MB) |")
    print("|---|---|---|---|---|---|")
    for name, runs in systems.items():
        times = [r["seconds_to_475"] for r in runs]
        solved = [t for t in times if t is not None]
        median = statistics.median(solved) if len(solved) == len(times) else None
        fps = statistics.median(r["fps"] for r in runs)
        peak = max(r["peak_pss_mb"] for r in runs)
        shown = ", ".join("not reached" if t is None else f"{t:.1f}" for t in times)
        steps = [r.get("env_steps") for r in runs]
        shown_steps = ", ".join("?" if n is None else f"{n:,}" for n in steps)
        print(f"| {name} | {shown} | {'n/a' if median is None else f'{median:.1f}'} | {shown_steps} | {fps:,.0f} | "
              f"{peak:,.0f} |")
        result[name] = {"seconds_to_475": [None if t is None else round(t, 2) for t in times],
                        "env_steps": steps, "fps": round(fps), "peak_pss_mb": round(peak)}
        startup = median_startup(runs)
        if startup:
            result[name]["startup"] = startup
    for name in (n for n in systems if "startup" in result.get(n, {})):
        s = result[name]["startup"]
        phases = ", ".join(f"{phase} {sec:.2f}" for phase, sec in s["phases_s"].items())
        first = "n/a" if s["first_step_s"] is None else f"{s['first_step_s']:.2f} s"
        print(f"\n{name} start-up (medians): components ready {s['ready_s']:.2f} s after launch ({phases}); "
              f"first training step at {first}")
    if "daskrl_baseline" in result:
        ratio = result["daskrl"]["fps"] / max(result["daskrl_baseline"]["fps"], 1)
        result["fps_ratio_to_baseline"] = round(ratio, 3)
        print(f"\ntraining frames/s, this tree / baseline ({args.baseline}): {ratio:.3f}")
    if args.task == "cartpole" and not args.no_limits:
        limits = result["limits"] = hardware_limits(args.env_backend)
        print(f"\nthe machine's limits, measured after the runs: the learner alone {limits['learner_samples_per_s']:,} "
              f"samples/s (the default MLP, one thread, one core); raw CartPole stepping with random actions (one "
              f"process per core, 32 envs each) and the training frames/s it allows with the learner on "
              f"{limits['cores']} cores:")
        for backend, bound in limits["by_backend"].items():
            name = system_name(backend)
            share = result[name]["fps"] / bound["training_fps_bound"]
            result[name]["share_of_bound"] = round(share, 3)
            print(f"  --env-backend {backend}: stepping {bound['env_fps']:,} frames/s, bound "
                  f"{bound['training_fps_bound']:,} training frames/s; {name} trained at {result[name]['fps']:,} "
                  f"({share:.0%} of it)")
    if args.json:
        print(json.dumps(result))


def system_name(backend: str) -> str:
    """The table's name of daskrl run with ``--env-backend backend``."""
    return "daskrl" if backend == "gymnasium" else f"daskrl_{backend}"


if __name__ == "__main__":
    main()
