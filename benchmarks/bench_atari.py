"""Atari training, daskrl against Sample Factory 2.1.1, one after the other (never at once): trained samples/s,
peak memory of each whole process tree, and the return reached in a fixed time.

Run:  python benchmarks/bench_atari.py [--json] [--game Pong] [--seconds 600]
      [--sample-factory-venv .venv-sf] [--only daskrl|sample_factory]

daskrl: ``daskrl train --env atari/<Game> --train-for-seconds S`` with the Atari family's defaults (what a user gets,
daskrl/config/env_defaults.py), without sticky actions (``--env-kwargs '{"sticky_actions": 0}'``) so that both play the
same game: Sample Factory's ``sf_examples.atari`` plays ``<Game>NoFrameskip-v4`` (no sticky actions, up to 30 no-ops,
4 frames a step with the max of the last two, 84x84 grayscale, 4 frames stacked, rewards clipped to +-1 for
training; it also ends an episode for training at each lost life and presses FIRE after a reset, which daskrl does
not: in Pong neither happens). Sample Factory gets the same training step as daskrl's family (samples per step,
minibatch, one pass, learning rate, clip, entropy bonus, asynchronous; GAE, its Atari default: it refuses V-trace
with normalized returns, which both use) and the same 32 envs, as 2 rollout
workers of 16 in two halves (its usual double-buffered layout on 2 cores; its policy always runs in a process of its
own); ``--sf-args`` adds or overrides Sample Factory options. Its venv, made once:

    python -m venv .venv-sf && .venv-sf/bin/pip install sample-factory==2.1.1 'gymnasium<1' 'numpy<2' \
        ale-py torch==2.13.0

What is reported, per framework:
- trained env steps/s: samples the learner trained on per second, from the end of a warm-up (``--warmup`` s after
  the first progress) to the end. daskrl: policy versions x samples per step, from ``metrics.csv``; its sampled env
  steps/s is shown too. Sample Factory: its "Total num frames" (trained samples x 4 frames, it counts frames) / 4.
- peak memory: the most that the run's whole process tree held at once, sampled every second, as summed RSS (what
  ``ps`` shows; pages shared between processes, torch's libraries, counted once per process) and as summed PSS
  (shared pages split between their users: what the tree really costs the machine).
- return: the mean game score of the last 100 episodes at the end (raw, not clipped): daskrl's
  ``episode_return_mean``, Sample Factory's "Avg episode reward".
- the machine's bound, measured after the runs (``--no-limits`` skips it): the game stepped with random actions on
  every core (bench_sampling.py's limit: 16 envs per process; envpool's pool where ``--daskrl-args`` chooses it), the
  learner's training step alone (bench_learner.py: the Nature CNN on the Atari family's step, one thread), the
  trained env steps/s the two allow together (bench_train.py's formula, benchmarks/common.py), and each run's share.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import training_fps_bound  # noqa: E402

SF_FRAMESKIP = 4  # Sample Factory counts frames (summaries_use_frameskip), 4 per env step


class TreeMemory:
    """Peak summed RSS and PSS of a process and its descendants, sampled every ``interval`` s on a thread."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = pss = 0
            try:
                root = psutil.Process(self.pid)
                for p in [root, *root.children(recursive=True)]:
                    try:
                        info = p.memory_full_info()
                        rss, pss = rss + info.rss, pss + info.pss
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
            except psutil.NoSuchProcess:
                return
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss / 2**20), max(self.peak_pss, pss / 2**20)
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(10)
        return {"peak_rss_mb": round(self.peak_rss), "peak_pss_mb": round(self.peak_pss)}


def _finish(proc: subprocess.Popen, deadline_s: float) -> None:
    """Wait for the run to end by itself; past the deadline Ctrl-C its process group (it saves and releases its
    shared memory), and kill it only if that does not end it."""
    try:
        proc.wait(deadline_s)
        return
    except subprocess.TimeoutExpired:
        pass
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def run_daskrl(game: str, seconds: float, warmup: float, tmp: str, extra: list[str]) -> dict:
    """``daskrl train`` in a subprocess (its own process group); rates from its metrics.csv."""
    from daskrl.config import Config
    from daskrl.config.env_defaults import apply_env_defaults

    env = f"atari/{game}"
    cmd = [sys.executable, "-m", "daskrl", "train", "--env", env, "--train-for-seconds", str(seconds),
           "--train-for-env-steps", "0", "--env-kwargs", json.dumps({"sticky_actions": 0.0}),
           "--train-dir", tmp, "--experiment", "daskrl", "--dashboard-address", "", "--report-interval", "5", *extra]
    print("daskrl:", shlex.join(cmd), flush=True)
    config = Config().replace(env=env)
    apply_env_defaults(config)
    per_step = config.learner.batch_size * config.learner.num_batches_per_epoch
    log = open(os.path.join(tmp, "daskrl_stdout.txt"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    memory = TreeMemory(proc.pid)
    _finish(proc, seconds + 240)
    peaks = memory.stop()
    log.close()
    with open(os.path.join(tmp, "daskrl", "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f)]
    if not rows:
        raise RuntimeError(f"daskrl wrote no progress rows (exit {proc.returncode}); see {log.name}")
    started = next(float(r["time_s"]) for r in rows if int(r["env_steps"]) > 0)
    steady = [r for r in rows if float(r["time_s"]) >= started + warmup] or rows[-2:]
    first, last = steady[0], steady[-1]
    dt = float(last["time_s"]) - float(first["time_s"]) or float("nan")
    trained = (int(last["policy_version"]) - int(first["policy_version"])) * per_step / dt
    sampled = (int(last["env_steps"]) - int(first["env_steps"])) / dt
    curve = [[round(float(r["time_s"])), int(r["env_steps"]), _number(r["episode_return_mean"])]
             for r in rows[::max(1, len(rows) // 20)] + rows[-1:]]  # about 20 points: the learning curve
    return {"trained_env_steps_per_s": round(trained, 1), "sampled_env_steps_per_s": round(sampled, 1),
            "curve_time_steps_return": curve,
            "env_steps": int(last["env_steps"]), "trained_samples": int(last["policy_version"]) * per_step,
            "return_mean_last_100": _number(last["episode_return_mean"]), "measured_s": round(dt, 1),
            "exit_code": proc.returncode, **peaks}


def machine_bound(game: str, extra: list[str]) -> dict:
    """What the machine allows an Atari run to train at: stepping on every core, the learner alone, both together."""
    from bench_learner import Step, measure
    from bench_sampling import limit_fps

    from daskrl.config import Config
    from daskrl.config.env_defaults import apply_env_defaults

    config = Config().replace(env=f"atari/{game}")
    apply_env_defaults(config)
    samples = config.learner.batch_size * config.learner.num_batches_per_epoch
    learner = measure(Step.of("cnn", gpu=False, samples=samples, minibatch=config.learner.batch_size), "cpu", 1, 1, 8)
    backend = "envpool" if "envpool" in extra else "gymnasium"
    env_fps = limit_fps(f"atari/{game}", 5.0, 16, backend)
    cores = os.cpu_count() or 1
    return {"env_fps": round(env_fps), "env_backend": backend, "learner_samples_per_s": round(learner),
            "cores": cores, "training_fps_bound": round(training_fps_bound(env_fps, learner, cores))}


def run_sample_factory(venv: str, game: str, seconds: float, warmup: float, tmp: str, extra: list[str]) -> dict:
    """``sf_examples.atari`` (through sf_atari.py) in its venv; rates and return from its log lines."""
    from daskrl.config import Config
    from daskrl.config.env_defaults import apply_env_defaults

    config = Config().replace(env=f"atari/{game}")
    apply_env_defaults(config)
    lrn = config.learner
    same = {"num_workers": 2, "num_envs_per_worker": 16, "worker_num_splits": 2, "rollout": config.sampler.rollout,
            "batch_size": lrn.batch_size, "num_batches_per_epoch": lrn.num_batches_per_epoch,
            "num_epochs": lrn.num_epochs, "learning_rate": lrn.learning_rate, "lr_schedule": "constant",
            "ppo_clip_ratio": lrn.clip_ratio, "exploration_loss_coeff": lrn.entropy_coef,
            "async_rl": True, "max_policy_lag": lrn.max_policy_lag, "device": "cpu", "with_wandb": False,
            "train_for_env_steps": 10**10}
    cmd = [os.path.join(venv, "bin", "python"), os.path.join(HERE, "sf_atari.py"), f"--env=atari_{game.lower()}",
           "--experiment=sf", f"--train_dir={tmp}", *(f"--{k}={v}" for k, v in same.items()), *extra]
    print("Sample Factory:", shlex.join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    memory = TreeMemory(proc.pid)
    t0, frames, returns, tail = time.monotonic(), [], [], []
    reader = threading.Thread(target=_read_sf, args=(proc, t0, frames, returns, tail,
                                                     open(os.path.join(tmp, "sf_stdout.txt"), "w")), daemon=True)
    reader.start()
    # SF 2.1.1's --train_for_seconds never fires (its runner never advances total_train_seconds): end it with
    # Ctrl-C ``seconds`` after its first report, as daskrl's clock starts with its run
    deadline = time.monotonic() + 240
    while not frames and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if frames:
        try:
            proc.wait(max(0.0, t0 + frames[0][0] + seconds - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    _finish(proc, 0)
    reader.join(30)
    peaks = memory.stop()
    moving = [(t, n) for t, n in frames if n > 0]
    if len(moving) < 2:
        raise RuntimeError(f"Sample Factory reported no training progress (exit {proc.returncode}): "
                           f"{''.join(tail)[-1500:]}")
    steady = [(t, n) for t, n in moving if t >= moving[0][0] + warmup]
    if len(steady) < 2:
        steady = moving[-2:]
    (t_a, n_a), (t_b, n_b) = steady[0], steady[-1]
    trained = (n_b - n_a) / SF_FRAMESKIP / (t_b - t_a)
    return {"trained_env_steps_per_s": round(trained, 1), "env_steps": n_b // SF_FRAMESKIP,
            "return_mean_last_100": returns[-1] if returns else None, "measured_s": round(t_b - t_a, 1),
            "settings": same, **peaks}


def _read_sf(proc: subprocess.Popen, t0: float, frames: list, returns: list, tail: list, log) -> None:
    """Collect (seconds, total frames) from "Total num frames: N" and the reward of "Avg episode reward" lines."""
    for line in proc.stdout:
        log.write(line)
        tail[:] = (tail + [line])[-30:]
        if m := re.search(r"Total num frames: (\d+)", line):
            frames.append((time.monotonic() - t0, int(m.group(1))))
        if m := re.search(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)\]", line):
            returns.append(float(m.group(1)))
    log.close()


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if value != value else round(value, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Pong", help="an Atari-57 game (atari/<Game>, SF's atari_<game>)")
    parser.add_argument("--seconds", type=float, default=600.0, help="training time of each run")
    parser.add_argument("--warmup", type=float, default=30.0,
                        help="seconds after the first progress that the rates leave out")
    parser.add_argument("--sample-factory-venv", default=os.environ.get("DASKRL_SF_VENV", ".venv-sf"),
                        help="a venv with sample-factory==2.1.1, ale-py, 'gymnasium<1', 'numpy<2'")
    parser.add_argument("--only", choices=["daskrl", "sample_factory"], default=None, help="run only this one")
    parser.add_argument("--daskrl-args", default="", help="more daskrl train options (one string)")
    parser.add_argument("--sf-args", default="", help="more Sample Factory options (one string)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--no-limits", action="store_true", help="skip measuring the machine's bound after the runs")
    args = parser.parse_args()
    sf_python = os.path.join(args.sample_factory_venv, "bin", "python")
    if args.only != "daskrl" and not os.path.exists(sf_python):
        parser.error(f"no Sample Factory venv at {args.sample_factory_venv} (see the top of this file, or pass "
                     "--sample-factory-venv, or --only daskrl)")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="daskrl_bench_atari_") as tmp:
        if args.only in (None, "daskrl"):
            results["daskrl"] = run_daskrl(args.game, args.seconds, args.warmup, tmp, shlex.split(args.daskrl_args))
        if args.only in (None, "sample_factory"):
            results["sample_factory"] = run_sample_factory(args.sample_factory_venv, args.game, args.seconds,
                                                           args.warmup, tmp, shlex.split(args.sf_args))
    print(f"\natari/{args.game}, {args.seconds:g} s of training each, one after the other, {os.cpu_count()} cores\n")
    print("| framework | trained env steps/s | env steps | mean return (last 100) | peak RSS MB (sum) | peak PSS MB |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['trained_env_steps_per_s']:,.0f} | {r['env_steps']:,} | {r['return_mean_last_100']} | "
              f"{r['peak_rss_mb']:,} | {r['peak_pss_mb']:,} |")
    if "daskrl" in results:
        print(f"  daskrl sampled {results['daskrl']['sampled_env_steps_per_s']:,.0f} env steps/s")
        print("  daskrl's curve (s, env steps, mean return of the last 100 episodes): "
              + ", ".join(f"{t} s {n:,} {r}" for t, n, r in results["daskrl"]["curve_time_steps_return"]))
    bound = None if args.no_limits else machine_bound(args.game, shlex.split(args.daskrl_args))
    if bound:
        print(f"\nthe machine's bound, measured after the runs: stepping {bound['env_fps']:,} env steps/s "
              f"({bound['env_backend']}, random actions, every core), the learner alone "
              f"{bound['learner_samples_per_s']:,} samples/s (the Nature CNN, one thread), together "
              f"{bound['training_fps_bound']:,} trained env steps/s on {bound['cores']} cores:")
        for name, r in results.items():
            r["share_of_bound"] = round(r["trained_env_steps_per_s"] / bound["training_fps_bound"], 3)
            print(f"  {name} trained at {r['trained_env_steps_per_s']:,.0f} ({r['share_of_bound']:.0%} of it)")
    if args.json:
        print(json.dumps({"benchmark": "atari", "game": args.game, "seconds": args.seconds, "warmup": args.warmup,
                          "cores": os.cpu_count(), "bound": bound, **results}))


if __name__ == "__main__":
    main()
