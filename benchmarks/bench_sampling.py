"""Sampling throughput against the hardware limit, for CartPole-v1, an image env (atari/Breakout: ALE, 84x84x4),
the same game through envpool (``--env-backend envpool``), CartPole-v1 and MuJoCo's HalfCheetah-v5 through
envpool beside the gymnasium backend, CartPole-v1 through gymnax (``--env-backend jax``), VizDoom (doom/basic:
128x72 RGB, 4 tics a step), CartPole-v1 with a recurrent policy (cartpole_lstm: --rnn lstm, the same sampler settings
as cartpole; the report gives its rate against the feed-forward policy's) and an env with Dict observations (dict:
MiniGrid-Empty-8x8, a 7x7x3 image and a direction index packed into one record per step).

Run:  python benchmarks/bench_sampling.py [--json] [--seconds 12]
      [--envs cartpole cartpole_envpool cartpole_jax halfcheetah halfcheetah_envpool cartpole_lstm image envpool doom
              dict]
      [--inference-precision float32] [--baseline DIR]

``--baseline DIR`` also measures (b) and (c) with the daskrl of another source tree (a git worktree of an older
commit: ``git worktree add /tmp/base <commit>``), in the same rounds, each run in a process of its own for both
trees alike, and prints this tree's frames/s over the baseline's per line (medians of the per-round ratios).

(a) limit: one process per core stepping a gymnasium SyncVectorEnv (32 CartPoles, 16 Ataris, 16 Dooms) with random
actions; for the envpool lines, one envpool of as many envs (one C++ thread) per core, set up as daskrl's backend
sets it; for the jax line, one process per core stepping daskrl's JaxGroup (as many gymnax envs in one jitted call);
(b) daskrl sampling-only run with inline inference (the policy runs in the rollout workers);
(c) daskrl sampling-only run with one inference worker (remote inference over the work queue; not for the envpool,
jax and HalfCheetah lines).
An envpool or jax line's (b) against its gymnasium line's (b) is what decides whether that backend pays: frames/s per
core of the same env and policy (both use every core), which the table prints as "envpool (b) / gymnasium (b)".
Each line is measured alone, one after the other, on this machine. The samplers run with the default
``--inference-precision auto`` (bfloat16 for the image policy where the CPU has it natively) unless told otherwise;
the precision they used is printed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import RateProbe, stop_if_signalled  # noqa: E402

ENVS = {"cartpole": "CartPole-v1", "image": "atari/Breakout",  # the image env needs the atari extra
        "envpool": "atari/Breakout",  # the envpool extra: the same game, stepped by envpool (--env-backend envpool)
        "cartpole_envpool": "CartPole-v1",  # CartPole stepped by envpool
        "cartpole_jax": "CartPole-v1",  # the jax extra and gymnax: gymnax's CartPole stepped in one jitted call
        "halfcheetah": "HalfCheetah-v5", "halfcheetah_envpool": "HalfCheetah-v5",  # the mujoco extra; envpool's
        "doom": "doom/basic",  # the doom extra (vizdoom): 128x72 RGB frames, 4 tics a step
        "cartpole_lstm": "CartPole-v1",  # CartPole with a recurrent policy (--rnn lstm)
        # the minigrid extra: Dict observations (a 7x7x3 image and a direction index), packed into records per step
        "dict": "minigrid:MiniGrid-Empty-8x8-v0"}
#: each line of a batched backend (envpool, jax) and the gymnasium line of the same env beside it
BACKEND_PAIRS = {"envpool": "image", "cartpole_envpool": "cartpole", "halfcheetah_envpool": "halfcheetah",
                 "cartpole_jax": "cartpole"}


def _limit_worker(env_id: str, num_envs: int, seconds: float, out, backend: str = "gymnasium") -> None:
    if backend == "envpool":
        return _envpool_limit_worker(env_id, num_envs, seconds, out)
    if backend == "jax":
        return _jax_limit_worker(env_id, num_envs, seconds, out)
    import gymnasium as gym

    from daskrl.envs import make_env

    vec = gym.vector.SyncVectorEnv([lambda: make_env(env_id) for _ in range(num_envs)])
    vec.reset(seed=0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            vec.step(vec.action_space.sample())
        steps += 50 * num_envs
    out.put(steps / (time.perf_counter() - t0))
    vec.close()


def _envpool_limit_worker(env_id: str, num_envs: int, seconds: float, out) -> None:
    """The envpool backend's limit: one pool (one C++ thread) of ``num_envs`` stepped with random actions."""
    import envpool
    import numpy as np

    from daskrl.envs.suites.envpool_group import envpool_task

    spec = envpool_task(env_id, {})
    pool = envpool.make(spec.task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, num_threads=1,
                        seed=0, **spec.options)
    pool.reset()
    space = pool.action_space
    rng = np.random.default_rng(0)

    def random_actions() -> np.ndarray:
        if hasattr(space, "n"):
            return rng.integers(0, space.n, num_envs, dtype=np.int32)
        return rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(space.dtype)

    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            pool.step(random_actions())
        steps += 50 * num_envs
    out.put(steps / (time.perf_counter() - t0))
    pool.close()


def _jax_limit_worker(env_id: str, num_envs: int, seconds: float, out) -> None:
    """The jax backend's limit: daskrl's group of ``num_envs`` gymnax envs (one jitted, vmapped call a step) stepped
    with random actions into arrays, as a rollout worker steps it."""
    import numpy as np

    from daskrl.envs.suites.jax_group import JaxGroup

    group = JaxGroup.from_spec(env_id, num_envs, seed=0)
    obs = np.zeros((num_envs, *group.obs_shape), np.float32)
    reward, terminated, truncated = np.zeros(num_envs, np.float32), np.zeros(num_envs, bool), np.zeros(num_envs, bool)
    group.reset(obs)
    rng = np.random.default_rng(0)
    space = group.model.action_space(group.params)
    group.step(rng.integers(0, space.n, num_envs), obs, reward, terminated, truncated)  # compiles the step
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            group.step(rng.integers(0, space.n, num_envs), obs, reward, terminated, truncated)
        steps += 50 * num_envs
    out.put(steps / (time.perf_counter() - t0))
    group.close()


def limit_fps(env_id: str, seconds: float, num_envs: int, backend: str = "gymnasium") -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_limit_worker, args=(env_id, num_envs, seconds, out, backend))
             for _ in range(os.cpu_count())]
    for p in procs:
        p.start()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def daskrl_fps(env_id: str, inference: str, seconds: float, options: dict, startup_s: float,
               sampling_only: bool = True, warmup: float = 4.0) -> tuple[float, dict]:
    """Frames/s of a sampling-only run (or, with ``sampling_only=False``, a training run), measured for ``seconds``
    after a warm-up, and the run's summary; ``startup_s`` is the most the run gets to build its envs before the
    warm-up can start (the probe ends the run once it has measured)."""
    from daskrl import train
    from daskrl.config import Config

    probe = RateProbe(warmup, seconds)
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.from_flat({
            "env": env_id, "sampling_only": sampling_only, "inference": inference, "train_dir": tmp,
            "experiment": "bench",
            "train_for_env_steps": 0, "train_for_seconds": startup_s + warmup + seconds,
            "report_interval": 1.0, "dashboard_address": "", **options})
        summary = train(config, observers=[probe])
    stop_if_signalled(summary)
    return probe.rate(), summary


def daskrl_fps_of(tree: str, env_id: str, inference: str, seconds: float, options: dict, startup_s: float) -> float:
    """:func:`daskrl_fps` in a process of its own with the daskrl of source tree ``tree`` first on its path (started
    from a scratch directory, so that ``python`` does not put this checkout first)."""
    spec = json.dumps({"env_id": env_id, "inference": inference, "seconds": seconds, "options": options,
                       "startup_s": startup_s})
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", spec], capture_output=True,
                              text=True, cwd=scratch, env={**os.environ, "PYTHONPATH": os.path.abspath(tree)},
                              timeout=startup_s + seconds + 180)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"measuring {env_id} ({inference}) with {tree} failed: {done.stderr[-1500:]}")
    return float(json.loads(lines[-1])["fps"])


def _measure(spec: str) -> None:
    """``--measure``: one :func:`daskrl_fps` of the daskrl on this process's path, printed as JSON."""
    s = json.loads(spec)
    fps, _ = daskrl_fps(s["env_id"], s["inference"], s["seconds"], s["options"], s["startup_s"])
    print(json.dumps({"fps": fps}))


def compare_trees(args: argparse.Namespace, inline: dict, remote: dict, startup: dict) -> dict:
    """This tree and ``--baseline``, (b) and (c) of each env, in turn within each round (the first of the two
    alternates between rounds, so an effect of the order hits both trees alike); returns per env the rounds' rates and the
    median of the per-round ratios (this tree / baseline)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out: dict[str, dict] = {}
    for round_index in range(args.rounds):
        order = (here, args.baseline) if round_index % 2 == 0 else (args.baseline, here)  # who goes first, in turn
        for key in args.envs:
            for mode, settings in (("inline", inline), ("remote", remote)):
                if key not in settings:
                    continue
                rates = {tree: daskrl_fps_of(tree, ENVS[key], mode, args.seconds, settings[key], startup[key][mode])
                         for tree in order}
                out.setdefault(f"{key} {mode}", []).append([rates[here], rates[args.baseline]])
    return {line: {"rounds": [[round(x) for x in pair] for pair in pairs],
                   "ratio": round(statistics.median(p[0] / p[1] for p in pairs), 3)} for line, pairs in out.items()}


def sample_factory_doom(venv: str, seconds: float, warmup: float = 25.0) -> dict:
    """Sample Factory 2.1.1's ``sf_examples.vizdoom`` on doom_basic (its own venv: it needs gymnasium < 1 and
    numpy < 2), 2 rollout workers x 16 envs, CPU. It has no sampling-only mode, so this is its *training* frames/s:
    the median of its 10-second FPS reports (printed every 5 s) from ``warmup`` s after launch for ``seconds`` s,
    in game frames (4 tics a step) and in env steps. The run is then ended (its whole process group)."""
    import re
    import signal

    tmp = tempfile.mkdtemp(prefix="daskrl_sf_")
    cmd = [os.path.join(venv, "bin", "python"), "-m", "sf_examples.vizdoom.train_vizdoom", "--env", "doom_basic",
           "--experiment", "sf", "--train_dir", tmp, "--num_workers", "2", "--num_envs_per_worker", "16",
           "--device", "cpu", "--with_wandb", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    t0, rates, tail = time.monotonic(), [], []
    try:
        for line in proc.stdout:
            tail = (tail + [line])[-20:]
            match = re.search(r"Fps is \(10 sec: ([\d.]+)", line)
            now = time.monotonic() - t0
            if match and now >= warmup:
                rates.append(float(match.group(1)))
            if now >= warmup + seconds:
                break
    finally:  # Ctrl-C first: its games close their shared memory; killed only if it does not stop
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    if not rates:
        raise RuntimeError(f"Sample Factory printed no FPS line after {warmup:g} s: {''.join(tail)[-800:]}")
    fps = statistics.median(rates)
    return {"frames_per_s": round(fps), "env_steps_per_s": round(fps / 4), "reports": len(rates)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement time per line (after warm-up)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="(a), (b), (c) are measured in turn this many times; the table shows medians")
    parser.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=list(ENVS), help="which envs to measure")
    from daskrl.config import INFERENCE_PRECISIONS

    parser.add_argument("--inference-precision", default="auto", choices=INFERENCE_PRECISIONS,
                        help="the samplers' --inference-precision (auto: what a user gets by default)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--baseline", default=None, help="also measure (b) and (c) with the daskrl of this source tree "
                                                         "(see the module docstring) and print this tree's ratio to it")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # one measurement, for --baseline
    parser.add_argument("--sample-factory-venv", default="",
                        help="a venv with sample-factory==2.1.1 and vizdoom: with --envs doom, also run its "
                             "sf_examples.vizdoom on doom_basic, right after daskrl's lines")
    args = parser.parse_args()
    if args.measure:
        return _measure(args.measure)
    # The sampler settings used here (also the documented fast settings for cheap envs):
    inline = {"cartpole": {"num_workers": 2, "num_envs_per_worker": 256, "worker_num_splits": 1},
              # 32 Ataris per worker: the CNN costs 15-25% less per frame than at 16 (68-74% of the limit in 5 of
              # 6 interleaved rounds against 54-76% with 16)
              "image": {"num_workers": 2, "num_envs_per_worker": 32, "worker_num_splits": 1},
              "envpool": {"num_workers": 2, "num_envs_per_worker": 32, "worker_num_splits": 1,
                          "env_backend": "envpool"},
              "doom": {"num_workers": 2, "num_envs_per_worker": 16, "worker_num_splits": 1},
              "dict": {"num_workers": 2, "num_envs_per_worker": 32, "worker_num_splits": 1},
              "halfcheetah": {"num_workers": 2, "num_envs_per_worker": 64, "worker_num_splits": 1}}
    inline["cartpole_lstm"] = {**inline["cartpole"], "rnn": "lstm"}
    for key, gymnasium_key in BACKEND_PAIRS.items():
        if key != "envpool":
            inline[key] = {**inline[gymnasium_key], "env_backend": key.split("_")[-1]}
    remote = {"cartpole": {"num_workers": 2, "num_envs_per_worker": 1024, "worker_num_splits": 2,
                           "num_inference_workers": 1},
              "image": {"num_workers": 2, "num_envs_per_worker": 16, "worker_num_splits": 2,
                        "num_inference_workers": 1},
              "doom": {"num_workers": 2, "num_envs_per_worker": 16, "worker_num_splits": 2,
                       "num_inference_workers": 1},
              "dict": {"num_workers": 2, "num_envs_per_worker": 32, "worker_num_splits": 2,
                       "num_inference_workers": 1}}
    remote["cartpole_lstm"] = {**remote["cartpole"], "rnn": "lstm"}
    # envs per limit process
    limit_envs = {"cartpole": 32, "image": 16, "envpool": 16, "doom": 16, "cartpole_lstm": 32, "dict": 32,
                  "cartpole_envpool": 32, "cartpole_jax": 256, "halfcheetah": 64, "halfcheetah_envpool": 64}
    # rollout workers build their envs at the same time: 32 Ataris per worker start sampling ~22 s after launch
    startup = {"cartpole": {"inline": 4.0, "remote": 4.0}, "image": {"inline": 30.0, "remote": 20.0},
               "envpool": {"inline": 30.0}, "doom": {"inline": 20.0, "remote": 20.0},
               "cartpole_lstm": {"inline": 4.0, "remote": 4.0}, "dict": {"inline": 6.0, "remote": 6.0},
               "cartpole_envpool": {"inline": 4.0}, "cartpole_jax": {"inline": 10.0}, "halfcheetah": {"inline": 8.0},
               "halfcheetah_envpool": {"inline": 8.0}}
    for options in (*inline.values(), *remote.values()):
        options["inference_precision"] = args.inference_precision
    if args.baseline:
        return _print_comparison(args, compare_trees(args, inline, remote, startup))
    results: dict[str, dict] = {}
    measured: dict[str, list] = {key: [] for key in args.envs}  # per env: (limit, inline, remote, runs) per round
    for _ in range(args.rounds):  # interleaved (envs too), so a slow spell of the machine hits all lines alike
        for key in args.envs:
            env_id = ENVS[key]
            limit = limit_fps(env_id, args.seconds, limit_envs[key], inline[key].get("env_backend", "gymnasium"))
            inline_fps, inline_run = daskrl_fps(env_id, "inline", args.seconds, inline[key], startup[key]["inline"])
            remote_fps, remote_run = daskrl_fps(env_id, "remote", args.seconds, remote[key], startup[key]["remote"]) \
                if key in remote else (0.0, {"time_shares": {}, "inference_precision": {}})  # envpool: inline only
            measured[key].append((limit, inline_fps, remote_fps, inline_run, remote_run))
    for key, per_round in measured.items():
        rounds = [r[:3] for r in per_round]
        inline_run, remote_run = per_round[-1][3:]
        limit, inline_fps, remote_fps = (statistics.median(r[i] for r in rounds) for i in range(3))
        results[key] = {"limit_fps": round(limit), "inline_fps": round(inline_fps), "remote_fps": round(remote_fps),
                        "rounds": [[round(x) for x in r] for r in rounds],
                        "inline_ratios": [r[1] / r[0] for r in rounds], "remote_ratios": [r[2] / r[0] for r in rounds],
                        "inline_settings": inline[key], "remote_settings": remote.get(key),
                        "inline_time_shares": inline_run["time_shares"],
                        "remote_time_shares": remote_run["time_shares"],
                        # what --inference-precision became on the samplers (the rollout workers inline, the
                        # inference worker remote)
                        "inline_precision": _one_precision(inline_run), "remote_precision": _one_precision(remote_run)}
    sample_factory = None
    if args.sample_factory_venv and "doom" in args.envs:  # training against training, like for like, one after the other
        sample_factory = sample_factory_doom(args.sample_factory_venv, args.seconds)
        trained, _ = daskrl_fps(ENVS["doom"], "inline", args.seconds, dict(inline["doom"]), 20.0, sampling_only=False,
                                warmup=25.0)
        sample_factory["daskrl_training_env_steps_per_s"] = round(trained)
    print(f"{os.cpu_count()} cores; {args.seconds:g} s per measurement after a 4 s warm-up; medians of "
          f"{args.rounds} interleaved rounds. The ratios are medians of the per-round ratios: each round measures "
          f"(a), (b) and (c) within a minute, so a slow spell of the machine moves all three of that round\n")
    print("| env | (a) limit: SyncVectorEnv, 1 process/core | (b) inline | (b)/(a) | (c) 1 inference worker | (c)/(a) |")
    print("|---|---|---|---|---|---|")
    for key, r in results.items():
        remote_cells = f"{r['remote_fps']:,} | {statistics.median(r['remote_ratios']):.0%}" if key in remote \
            else "- | -"
        print(f"| {_label(key)} | {r['limit_fps']:,} | {r['inline_fps']:,} | "
              f"{statistics.median(r['inline_ratios']):.0%} | {remote_cells} |")
    backend_gains = backend_gains_of(results)
    for key, gains in backend_gains.items():
        backend = inline[key]["env_backend"]
        print(f"\n{_label(key)}: {backend} (b) / gymnasium (b), per round: {', '.join(f'{x:.2f}' for x in gains)} "
              f"(median {statistics.median(gains):.2f}; above 1: the {backend} backend samples faster per core)")
    for key, r in results.items():
        print(f"  {_label(key)} rounds (limit, inline, remote): {r['rounds']}")
        # each round measures the three side by side, so its ratios are not skewed by the machine's slow spells
        print(f"  {_label(key)} ratios per round, (b)/(a): {', '.join(f'{x:.0%}' for x in r['inline_ratios'])}; "
              f"(c)/(a): {', '.join(f'{x:.0%}' for x in r['remote_ratios'])}")
    if "cartpole" in results and "cartpole_lstm" in results:  # the recurrent policy's cost, same env and settings
        ff, rnn = results["cartpole"], results["cartpole_lstm"]
        print(f"  CartPole-v1 --rnn lstm against feed-forward: inline {rnn['inline_fps'] / ff['inline_fps']:.0%}, "
              f"remote {rnn['remote_fps'] / ff['remote_fps']:.0%} (medians of rounds)")
    for key, r in results.items():
        print(f"  {_label(key)} policy precision: inline {r['inline_precision']}, remote {r['remote_precision']} "
              f"(--inference-precision {args.inference_precision})")
    print("\nwhere the time goes (share of wall time per component, last round):")
    for key, r in results.items():
        for mode in ("inline", "remote") if key in remote else ("inline",):
            print(f"  {_label(key)} {mode}: {json.dumps(r[f'{mode}_time_shares'])}")
    if sample_factory:
        print(f"\ndoom/basic training, 2 rollout workers x 16 envs, one after the other: Sample Factory 2.1.1 "
              f"{sample_factory['env_steps_per_s']:,} env steps/s ({sample_factory['frames_per_s']:,} game frames/s), "
              f"daskrl {sample_factory['daskrl_training_env_steps_per_s']:,} env steps/s")
    if args.json:
        print(json.dumps({k: {"limit_fps": v["limit_fps"], "inline_fps": v["inline_fps"],
                              "remote_fps": v["remote_fps"] if k in remote else None,
                              "inline_ratio_median_of_rounds": round(statistics.median(v["inline_ratios"]), 3),
                              "remote_ratio_median_of_rounds": round(statistics.median(v["remote_ratios"]), 3)
                              if k in remote else None,
                              "inline_precision": v["inline_precision"], "remote_precision": v["remote_precision"]}
                          for k, v in results.items()}
                         | ({"sample_factory_doom": sample_factory} if sample_factory else {})
                         | {f"{key}_inline_vs_gymnasium_inline": round(statistics.median(gains), 3)
                            for key, gains in backend_gains.items()}))


def backend_gains_of(results: dict[str, dict]) -> dict[str, list[float]]:
    """Per envpool or jax line measured beside its gymnasium line: its (b) over the gymnasium line's (b) in each
    round (the same env and policy, measured in the same rounds)."""
    return {key: [e[1] / g[1] for e, g in zip(results[key]["rounds"], results[gym_key]["rounds"], strict=True) if g[1]]
            for key, gym_key in BACKEND_PAIRS.items() if key in results and gym_key in results}


def _print_comparison(args: argparse.Namespace, lines: dict[str, dict]) -> None:
    print(f"{os.cpu_count()} cores; {args.seconds:g} s per measurement after a 4 s warm-up; {args.rounds} rounds, this "
          f"tree and {args.baseline} in turn within each (each run a process of its own)\n")
    print("| line | this tree, frames/s per round | baseline, per round | this / baseline (median of rounds) |")
    print("|---|---|---|---|")
    for line, r in lines.items():
        key, mode = line.split()
        print(f"| {_label(key)} {mode} | {', '.join(f'{p[0]:,}' for p in r['rounds'])} | "
              f"{', '.join(f'{p[1]:,}' for p in r['rounds'])} | {r['ratio']:.3f} |")
    if args.json:
        print(json.dumps({"baseline": args.baseline, "lines": lines}))


def _label(key: str) -> str:
    backend = f" ({key.split('_')[-1]})" if key.endswith(("_envpool", "_jax")) else " (envpool)" if key == "envpool" \
        else ""
    return ENVS[key] + backend + {"cartpole_lstm": " (--rnn lstm)"}.get(key, "")


def _one_precision(summary: dict) -> str:
    """The precision the run's samplers reported (they all resolve the same setting on one machine)."""
    used = sorted(set(summary["inference_precision"].values()))
    if not used:
        return "not reported"
    return used[0] if len(used) == 1 else "mixed: " + ", ".join(used)


if __name__ == "__main__":
    main()
