"""A long run on SLURM jobs that end: workers with a lifetime under an adaptive SLURMCluster, against the same run on
jobs that never end, on this machine's SLURM test cluster (daskrl/testing/hosts/slurm.py: 3 nodes, 2 CPUs each).

Run:  python benchmarks/job_turnover.py --minutes 20 --json
      python benchmarks/job_turnover.py --minutes 4 --lifetime 60 --stagger 10 --walltime 2   # a quick look

Each run: dask-jobqueue's ``SLURMCluster`` (one single-threaded worker per job), ``cluster.adapt(minimum_jobs=2,
maximum_jobs=4)``, and ``daskrl.start`` of CartPole-v1 (the defaults; elastic, as every run on a cluster that
changes) for ``--minutes``. The turnover run's workers get ``--lifetime`` and ``--lifetime-stagger`` (dask-jobqueue's
``worker_extra_args``) below the jobs' ``--walltime``, so each job's worker retires before SLURM would end it and
the adaptive cluster submits a new job; the baseline's jobs have neither (and a walltime past the run). Halfway
through the turnover run, the learner's job is cancelled with ``scancel`` (SIGTERM, then SIGKILL after KillWait):
the loss the run recovers from its newest checkpoint.

Printed: env steps/s of each run over the whole run and its ratio (turnover / baseline), how many jobs ran in
each, how many times each starting job's place was taken by a new one, every learner move (one line each, with its
seconds), the recoveries, slots filled and taken (slots lost at retirements), the checkpoints written and whether
each loads, and whether the run trained in every minute. With --json, one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch

from daskrl.testing.hosts.slurm import SlurmTestCluster, slurm_unavailable

#: the adaptive range of both runs (jobs of one worker each): the run uses 3 (a learner, 2 rollout workers)
MIN_JOBS, MAX_JOBS = 2, 4


def slurm_cluster(slurm: SlurmTestCluster, args: argparse.Namespace, turnover: bool, log_dir: str):
    from dask_jobqueue import SLURMCluster

    lifetime = ["--lifetime", f"{args.lifetime}s", "--lifetime-stagger", f"{args.stagger}s"] if turnover else []
    walltime = args.walltime if turnover else args.minutes + 10
    return SLURMCluster(cores=1, processes=1, memory="1GB", walltime=f"00:{walltime:02d}:00",
                        worker_extra_args=lifetime, log_directory=log_dir,
                        scheduler_options={"host": slurm.scheduler_host, "dashboard_address": ":0"})


class JobWatch:
    """Every job the run's cluster started, when it was first seen running and when it left the queue."""

    def __init__(self, slurm: SlurmTestCluster) -> None:
        self.slurm = slurm
        self.jobs: dict[str, dict[str, float]] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(2.0):
            now = time.monotonic()
            listed = {j["id"]: j for j in self.slurm.jobs()}
            for job_id, job in listed.items():
                if job["state"] == "RUNNING":
                    self.jobs.setdefault(job_id, {"start": now})
            for job_id, seen in self.jobs.items():
                if job_id not in listed and "end" not in seen:
                    seen["end"] = now

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def replacements_per_place(self) -> list[int]:
        """How many times each of the first ``MIN_JOBS`` jobs' places was taken by a later job: jobs ordered by
        start, place ``i`` holds jobs ``i``, ``i + MIN_JOBS``, ... (a turnover of about one job at a time)."""
        order = sorted(self.jobs, key=lambda j: self.jobs[j]["start"])
        return [len(order[i::MIN_JOBS]) - 1 for i in range(MIN_JOBS)]


def learner_job(client, cluster) -> str | None:
    """The SLURM job of the worker that runs the learner."""
    from daskrl.runtime.dask_internals import cluster_workers

    components = client.sync(client.scheduler.daskrl_components)["components"]
    address = next((info["address"] for name, info in components.items() if name.endswith("/learner")), None)
    name = str(cluster_workers(client).get(address, {}).get("name", ""))
    job = cluster.workers.get(name)
    return getattr(job, "job_id", None)


def one_run(slurm: SlurmTestCluster, args: argparse.Namespace, turnover: bool, root: str) -> dict:
    from distributed import Client

    import daskrl
    from daskrl.config import Config

    cluster = slurm_cluster(slurm, args, turnover, os.path.join(root, "jobs"))
    cluster.adapt(minimum_jobs=MIN_JOBS, maximum_jobs=MAX_JOBS)
    watch = JobWatch(slurm)
    client = Client(cluster, direct_to_workers=True)
    rows: list[tuple[float, int]] = []
    cancelled = None
    try:
        client.wait_for_workers(MIN_JOBS, timeout=120)  # the run asks the adaptive cluster for the rest
        config = Config.from_flat({"env": "CartPole-v1", "train_for_seconds": args.minutes * 60.0,
                                   "train_for_env_steps": 0, "train_dir": root, "experiment": "turnover",
                                   "dashboard_address": "", "checkpoint_interval": 30.0, "elastic": True})
        t0 = time.monotonic()
        handle = daskrl.start(config, client=client, on_report=lambda row: rows.append(
            (time.monotonic() - t0, int(row["env_steps"]))))
        while not handle.done:
            if turnover and cancelled is None and time.monotonic() - t0 > args.minutes * 30:
                cancelled = learner_job(client, cluster)
                if cancelled:
                    subprocess.run(["scancel", cancelled], check=False, timeout=30)
                    print(f"  scancel {cancelled} (the learner's job) at {time.monotonic() - t0:.0f} s", flush=True)
            time.sleep(1.0)
        summary = handle.wait()
    finally:
        client.close()
        cluster.close()
        watch.stop()
    return {"summary": summary, "rows": rows, "jobs": watch.jobs, "places": watch.replacements_per_place(),
            "cancelled": cancelled, "checkpoints": check_checkpoints(os.path.join(root, "turnover"))}


def check_checkpoints(experiment: str) -> dict:
    """Every checkpoint the run kept, and whether each loads."""
    found = sorted(os.path.join(d, f) for d, _, files in os.walk(experiment) for f in files if f.endswith(".pt"))
    bad = []
    for path in found:
        try:
            torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            bad.append(f"{path}: {exc}")
    return {"count": len(found), "unreadable": bad}


def minutes_trained(rows: list[tuple[float, int]]) -> list[int]:
    """Env steps trained in each whole minute of the run."""
    out, last, minute = [], 0, 1
    for t, steps in rows:
        while t >= minute * 60:
            out.append(steps - last)
            last, minute = steps, minute + 1
    return out


def describe(name: str, run: dict, seconds: float) -> dict:
    s = run["summary"]
    path = s.get("data_path", {})
    filled, taken = sum(path.get("slots_filled", {}).values()), sum(path.get("slots_taken", {}).values())
    moves = s.get("learner_moves", [])
    rate = s["env_steps"] / seconds
    per_minute = minutes_trained(run["rows"])
    print(f"{name}: {s['env_steps']:,} env steps in {seconds:.0f} s ({rate:,.0f} env steps/s); {len(run['jobs'])} "
          f"jobs ran; each starting job replaced {run['places']} times; env steps per minute {per_minute}")
    for move in moves:
        print(f"  learner move: {move['from']} -> {move['to']} in {move['move_s']:.2f} s "
              f"({move['retires_in_s']:.0f} s before its worker retired)")
    for rec in s.get("recoveries", []):
        print(f"  recovery: {rec.get('component')} ({rec.get('cause')}) in {rec.get('recovery_s')} s")
    print(f"  slots filled {filled:,}, taken {taken:,} (lost {filled - taken:,}); checkpoints {run['checkpoints']}")
    return {"env_steps": s["env_steps"], "seconds": round(seconds, 1), "env_steps_per_s": round(rate, 1),
            "jobs": len(run["jobs"]), "replacements_per_place": run["places"], "learner_moves": moves,
            "recoveries": s.get("recoveries", []), "slots_filled": filled, "slots_taken": taken,
            "env_steps_per_minute": per_minute, "checkpoints": run["checkpoints"], "cancelled_job": run["cancelled"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--lifetime", type=int, default=180, help="seconds a turnover worker lives")
    parser.add_argument("--stagger", type=int, default=30, help="+- seconds on the lifetime")
    parser.add_argument("--walltime", type=int, default=4, help="minutes: the turnover jobs' walltime")
    parser.add_argument("--only", choices=("baseline", "turnover"), help="one of the two runs (a quick look)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = slurm_unavailable()
    if reason:
        sys.exit(f"job_turnover: cannot run the SLURM test cluster here: {reason}")
    results = {}
    with SlurmTestCluster(nodes=3, cpus=2) as slurm:
        for name, turnover in (("baseline (jobs that never end)", False), ("turnover", True)):
            if args.only and args.only != ("turnover" if turnover else "baseline"):
                continue
            root = tempfile.mkdtemp(prefix="daskrl_turnover_")
            try:
                run = one_run(slurm, args, turnover, root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            results["turnover" if turnover else "baseline"] = describe(name, run, args.minutes * 60.0)
    if args.only:
        return
    base, turn = results["baseline"], results["turnover"]
    ratio = turn["env_steps_per_s"] / base["env_steps_per_s"] if base["env_steps_per_s"] else float("nan")
    slowest = max((m["move_s"] for m in turn["learner_moves"]), default=float("nan"))
    print(f"env steps/s turnover / baseline: {ratio:.3f} (goal >= 0.70); learner moves: "
          f"{len(turn['learner_moves'])}, the slowest {slowest:.2f} s (goal < 10); fewest replacements of a starting "
          f"job: {min(turn['replacements_per_place'], default=0)} (goal >= 4); "
          f"median minute {statistics.median(turn['env_steps_per_minute'] or [0]):,.0f} env steps")
    if args.json:
        print(json.dumps({"bench": "job_turnover", "minutes": args.minutes, "lifetime_s": args.lifetime,
                          "stagger_s": args.stagger, "walltime_min": args.walltime, "ratio": round(ratio, 4),
                          **results}))


if __name__ == "__main__":
    main()
