"""Soak: train for a long time on the embedded cluster and watch the memory of every process of the run.

Run:  python benchmarks/soak.py --minutes 30 [--env CartPole-v1] [--interval 10] [--json]
      python benchmarks/soak.py --minutes 30 --env atari/Breakout                    # image slots, the CNN learner
      python benchmarks/soak.py --minutes 30 --num-policies 4 --pbt --inference remote --kill-every 180   # chaos

The run is an ordinary ``daskrl.train()`` (``--train-for-seconds`` = minutes x 60, no step limit, default
options otherwise), in this process. Every ``--interval`` seconds the RSS and PSS (proportional set size: pages
shared between processes, such as the forkserver's preloaded torch, are split between their users, so the PSS of
all processes adds up to the memory the run really holds) of the driver and all its descendants (scheduler and
nannies live in the driver; the forkserver, the resource tracker and the worker processes are its descendants)
is sampled, each process labelled with the components it hosts. A table is printed as the samples come and again
at the end, followed by the growth of the total PSS from the 5-minute mark (1/6 of the run for runs shorter than
30 minutes) to the end: a run that leaks grows steadily after its warm-up, a healthy one stays flat.

``--kill-every S`` SIGKILLs a random worker process that hosts a component every S seconds (a chaos soak): each
kill must be recovered. At the end the soak accounts for the trajectory slots (each rollout worker's slots filled
against the slots the learners took; slots of a killed incarnation are lost with its memory and counted as dropped
by the batcher), and checks that no process of the run and no ``/dev/shm`` segment of its is left. The soak exits 0
when the run ended in order, every kill was recovered, PSS grew less than 5% from the baseline, no slot of a worker
that was not killed is missing and nothing is left; else 1. With ``--json`` the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time

import psutil

MiB = 2**20
ROLES = ("driver", "forkserver", "learner", "rollout", "inference", "other")


def role_of(proc: psutil.Process, me: int, components: dict[int, list[str]]) -> str:
    names = components.get(proc.pid)
    if names:  # registry names are "<run>/<component>", e.g. "7ed6d877/learner_p0"
        kinds = sorted({n.rsplit("/", 1)[-1].split("_")[0] for n in names})
        return kinds[0] if len(kinds) == 1 and kinds[0] in ROLES else "other"
    if proc.pid == me:
        return "driver"
    try:
        if "forkserver" in " ".join(proc.cmdline()[:4]) and proc.ppid() == me:
            return "forkserver"
    except psutil.Error:
        pass
    return "other"  # resource tracker, idle or restarting workers


def component_pids() -> dict[int, list[str]]:
    """pid -> names of the daskrl components it hosts, from the bus registry of the running training."""
    try:
        from distributed import default_client

        client = default_client()
        registry = client.sync(client.scheduler.daskrl_components, callback_timeout=5)["components"]
    except Exception:  # not started yet, or closing
        return {}
    out: dict[int, list[str]] = {}
    for name, info in registry.items():
        out.setdefault(int(info.get("pid", 0)), []).append(name)
    return out


def sample(t: float, env_steps: int) -> dict:
    """Memory of this process and all its descendants now."""
    me = os.getpid()
    root = psutil.Process(me)
    components = component_pids()
    processes = []
    for proc in [root] + root.children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            mem = proc.memory_full_info()
            processes.append({"pid": proc.pid, "role": role_of(proc, me, components),
                              "components": components.get(proc.pid, []),
                              "rss_mib": round(mem.rss / MiB, 1), "pss_mib": round(mem.pss / MiB, 1)})
        except psutil.Error:  # exited meanwhile
            continue
    by_role = {role: round(sum(p["pss_mib"] for p in processes if p["role"] == role), 1) for role in ROLES}
    return {"t": round(t, 1), "env_steps": env_steps, "processes": len(processes),
            "rss_mib": round(sum(p["rss_mib"] for p in processes), 1),
            "pss_mib": round(sum(p["pss_mib"] for p in processes), 1), "pss_by_role_mib": by_role,
            "detail": processes}


def table_header() -> str:
    return (f"{'time':>7} {'env steps':>12} {'procs':>5} {'RSS MiB':>9} {'PSS MiB':>9} | "
            + " ".join(f"{r:>10}" for r in ROLES) + "   (PSS MiB per role)")


def table_row(s: dict) -> str:
    return (f"{s['t']:>6.0f}s {s['env_steps']:>12,} {s['processes']:>5} {s['rss_mib']:>9.1f} {s['pss_mib']:>9.1f} | "
            + " ".join(f"{s['pss_by_role_mib'][r]:>10.1f}" for r in ROLES))


def growth(samples: list[dict], baseline_s: float, key: str = "pss_mib") -> tuple[float, dict | None]:
    """% growth of the total PSS (or ``key``) from the first sample at or after ``baseline_s`` to the last one."""
    later = [s for s in samples if s["t"] >= baseline_s]
    if len(later) < 2:
        return float("nan"), None
    base, end = later[0], samples[-1]
    return 100.0 * (end[key] - base[key]) / base[key], base


class Killer:
    """Every ``every`` seconds, SIGKILL a random worker process that hosts a component of the run."""

    def __init__(self, every: float, seed: int = 0) -> None:
        self.every, self.rng, self.kills = every, random.Random(seed), []

    def run(self, done: threading.Event, t0: float) -> None:
        while not done.wait(self.every):
            victims = {pid: names for pid, names in component_pids().items() if pid and pid != os.getpid()}
            if not victims:
                continue
            pid = self.rng.choice(sorted(victims))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append({"t": round(time.monotonic() - t0, 1), "pid": pid, "components": victims[pid]})
            print(f"soak: {time.monotonic() - t0:.0f} s: SIGKILLed worker process {pid} ({', '.join(victims[pid])})",
                  flush=True)


def slot_accounting(summary: dict, killed: set[str], in_flight: int) -> dict:
    """Slots each rollout worker filled against those the learners took. A worker killed at some point restarted
    its count (its last incarnation's is what is known) and lost the slots in flight, so only the others must add
    up: none missing beyond the ``in_flight`` slots a worker holds (filled, not yet taken when sampling stopped).
    With several policies a slot may hold several policies' steps, each taken by its policy's learner."""
    path = summary["data_path"]
    rows = {name: {"filled": filled, "taken": path["slots_taken"].get(name, 0), "killed": name in killed}
            for name, filled in sorted(path["slots_filled"].items())}
    missing = {name: r["filled"] - r["taken"] for name, r in rows.items()
               if not r["killed"] and r["filled"] - r["taken"] > in_flight}
    return {"workers": rows, "dropped": path.get("slots_dropped", 0), "missing_from_unkilled": missing,
            "filled": sum(r["filled"] for r in rows.values()), "taken": sum(path["slots_taken"].values())}


def slots_per_worker(config_json: str) -> int:
    """A rollout worker's trajectory slots, from the run's config.json (the env family's defaults applied)."""
    from daskrl.config import Config

    with open(config_json) as f:
        sampler = Config.from_json(f.read()).sampler
    return sampler.slots_per_split * sampler.num_splits()


def leftovers(before_pids: set[int], run_ids: set[str]) -> tuple[list[str], list[str]]:
    """Processes under this one that appeared during the run and the run's daskrl segments (by its run id: another
    run on the host has its own), still there (this interpreter's multiprocessing helpers are not the run's)."""
    from daskrl.runtime.cleanup.segments import list_segments

    deadline = time.monotonic() + 30
    while True:
        procs = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in psutil.Process().children(recursive=True)
                 if p.pid not in before_pids and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                 and not _interpreters_own(p)]
        segments = [n for run_id in sorted(run_ids) for n in list_segments(run_id)]
        if (not procs and not segments) or time.monotonic() > deadline:
            return procs, segments
        time.sleep(0.5)


def _interpreters_own(proc: psutil.Process) -> bool:
    """This interpreter's multiprocessing helpers (the forkserver the workers fork from, the resource tracker): they
    live as long as this process, whatever the run does."""
    try:
        command = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return "multiprocessing.forkserver" in command or "multiprocessing.resource_tracker" in command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to train")
    parser.add_argument("--env", default="CartPole-v1", help="env spec (Acrobot-v1 keeps learning for longer)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between memory samples")
    parser.add_argument("--train-dir", default="", help="where the experiment goes (default: a temp dir, removed)")
    parser.add_argument("--num-policies", type=int, default=1)
    parser.add_argument("--pbt", action="store_true", help="population-based training of the policies")
    parser.add_argument("--inference", default="", help="inline or remote (default: the run's default)")
    parser.add_argument("--kill-every", type=float, default=0.0, help="SIGKILL a random component's worker "
                                                                        "process every this many seconds (0: never)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()

    from daskrl.runtime.workers import worker_server

    worker_server.start()  # as the daskrl command does: workers are forked from a preloaded forkserver
    # the API's imports (distributed among them) done here, before the sampler thread imports from distributed:
    # two threads importing distributed at once break its circular imports ("partially initialized module")
    from daskrl.api import train
    from daskrl.config import Config

    duration = args.minutes * 60.0
    baseline_s = min(300.0, duration / 6)
    train_dir = args.train_dir or tempfile.mkdtemp(prefix="daskrl_soak_")
    options = {"num_policies": args.num_policies, "pbt": args.pbt, **({"inference": args.inference}
                                                                       if args.inference else {})}
    config = Config().replace(env=args.env, train_dir=train_dir, experiment=f"soak_{time.strftime('%Y%m%d_%H%M%S')}",
                              train_for_env_steps=0, train_for_seconds=duration, dashboard_address="",
                              report_interval=10.0, **options)
    before_pids = {p.pid for p in psutil.Process().children(recursive=True)}
    run_ids: set[str] = set()  # the run's id, from its components' names ("<run>/<component>")
    killer = Killer(args.kill_every) if args.kill_every else None
    latest = {"env_steps": 0}
    samples: list[dict] = []
    done = threading.Event()
    t0 = time.monotonic()

    def sampler() -> None:
        print(table_header(), flush=True)
        while True:
            run_ids.update(name.split("/", 1)[0] for names in component_pids().values() for name in names
                           if "/" in name)
            s = sample(time.monotonic() - t0, latest["env_steps"])
            samples.append(s)
            print(table_row(s), flush=True)
            if done.wait(args.interval):
                return

    thread = threading.Thread(target=sampler, name="soak-sampler", daemon=True)
    thread.start()
    if killer is not None:
        threading.Thread(target=killer.run, args=(done, t0), name="soak-killer", daemon=True).start()
    try:
        summary = train(config, on_report=lambda row: latest.update(env_steps=int(row["env_steps"])))
    finally:
        done.set()
        thread.join(60)
        run_slots = slots_per_worker(os.path.join(config.experiment_dir, "config.json"))
        if not args.train_dir:
            import shutil

            shutil.rmtree(train_dir, ignore_errors=True)
    procs_left, segments_left = leftovers(before_pids, run_ids)
    kills = killer.kills if killer is not None else []
    killed = {name.rsplit("/", 1)[-1] for kill in kills for name in kill["components"]}
    slots = slot_accounting(summary, killed, in_flight=run_slots)
    recoveries = summary.get("recoveries", [])
    running = [s for s in samples if s["pss_by_role_mib"]["learner"] > 0]  # samples taken while the run was up
    pct, base = growth(running, baseline_s)
    rss_pct, _ = growth(running, baseline_s, "rss_mib")

    print(f"\nsoak: {args.env}, {args.minutes:g} min, {summary['env_steps']:,} env steps "
          f"({summary['mean_fps']:,.0f} frames/s on average), final mean return {summary['episode_return_mean']:.1f}")
    print(table_header())
    for s in samples:
        print(table_row(s))
    if base is None:
        print("soak: too few samples to measure growth (run longer or lower --interval)")
    else:
        end = running[-1]
        print(f"soak: total PSS {base['pss_mib']:.1f} MiB at {base['t']:.0f} s -> {end['pss_mib']:.1f} MiB at "
              f"{end['t']:.0f} s: {pct:+.1f}% (baseline: the first sample at or after {baseline_s:.0f} s)")
        print(f"soak: summed RSS (shared pages counted in every process) {base['rss_mib']:.1f} -> "
              f"{end['rss_mib']:.1f} MiB: {rss_pct:+.1f}%. PSS can grow while RSS stays flat: forked workers "
              "unshare the forkserver's preloaded pages as Python touches them (copy-on-write), up to their RSS")
        for role in ROLES:
            a, b = base["pss_by_role_mib"][role], end["pss_by_role_mib"][role]
            if a or b:
                print(f"  {role:>10}: {a:8.1f} -> {b:8.1f} MiB ({(100 * (b - a) / a) if a else float('nan'):+.1f}%)")
    print(f"soak: stopped: {summary['stop_reason']}; {len(kills)} kills, {len(recoveries)} recoveries")
    print(f"soak: slots filled {slots['filled']:,}, taken by the learners {slots['taken']:,}, dropped (a killed "
          f"worker's, memory gone) {slots['dropped']:,}; missing from workers never killed: "
          f"{slots['missing_from_unkilled'] or 'none'}")
    for name, row in slots["workers"].items():
        print(f"  {name:>12}: filled {row['filled']:,}, taken {row['taken']:,}{' (killed)' if row['killed'] else ''}")
    print(f"soak: left after the run: {len(procs_left)} processes {procs_left}, {len(segments_left)} /dev/shm "
          f"segments {segments_left[:5]}")
    ok = (summary["stop_reason"].startswith("trained for") and len(recoveries) >= len(kills)
          and base is not None and pct < 5.0 and not slots["missing_from_unkilled"] and not procs_left
          and not segments_left)
    print(f"soak: {'PASS' if ok else 'FAIL'} (exit code {0 if ok else 1})")
    if args.json:
        print(json.dumps({"minutes": args.minutes, "env": args.env, "options": options, "baseline_s": baseline_s,
                          "env_steps": summary["env_steps"], "samples": samples,
                          "growth_pct": None if base is None else round(pct, 2),
                          "rss_growth_pct": None if base is None else round(rss_pct, 2), "kills": kills,
                          "recoveries": len(recoveries), "slots": slots, "processes_left": procs_left,
                          "segments_left": segments_left, "stop_reason": summary["stop_reason"], "pass": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
