"""Env leftovers drill: what of an env's own processes and ``/dev/shm`` entries a run leaves behind, after each of the
five ends of ``daskrl.testing.env_leftovers`` (a rollout worker SIGKILLed, the driver SIGKILLed, the process group
SIGKILLed, Ctrl-C, a normal end), counted 15 s after the run ended.

Run:  python benchmarks/env_leftovers.py [--env doom/basic] [--num-workers 2] [--num-envs 8] [--json]

``doom/basic`` (needs ``pip install 'daskrl[doom]'``) counts ``vizdoom`` engine processes and ``/dev/shm/ViZDoom*``
entries; ``--env process`` uses the test env of :mod:`daskrl.testing.environments.process_envs` (a child process
and an entry per env). Only processes and entries that appear after the drill starts count. Exit code 1 if any case
left something.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

from daskrl.testing.env_leftovers import CASES, EnvTraces, run_case
from daskrl.testing.environments.process_envs import entry_prefix


def _target(env: str) -> tuple[str, str, EnvTraces]:
    if env == "process":
        tag = uuid.uuid4().hex[:8]
        spec = "daskrl.testing.environments.process_envs:with_process"
        return spec, json.dumps({"tag": tag, "leaky_close": True}), EnvTraces(entry_prefix(tag), entry_prefix(tag))
    if env.startswith("doom/"):
        return env, "{}", EnvTraces("vizdoom/vizdoom", "ViZDoom")
    raise SystemExit(f"--env: 'process' or a doom/<scenario>, not {env!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="doom/basic")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0, help="training time of the runs that end by themselves")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    spec, env_kwargs, traces = _target(args.env)
    results = []
    with tempfile.TemporaryDirectory(prefix="env-leftovers-") as tmp:
        for case in args.cases:
            train_args = ["--env", spec, "--env-kwargs", env_kwargs, "--train-dir", tmp, "--experiment", case,
                          "--num-workers", str(args.num_workers), "--num-envs-per-worker", str(args.num_envs),
                          "--train-for-env-steps", "0", "--train-for-seconds", str(args.seconds),
                          "--dashboard-address", "", "--report-interval", "1"]
            result = run_case(case, train_args, traces, args.num_workers * args.num_envs, Path(tmp) / f"{case}.log")
            results.append(result)
            print(f"{case:<11} rc {result.returncode!s:>4} | while training: {result.peak_processes} processes, "
                  f"{result.peak_entries} entries | killed worker's processes gone after "
                  f"{result.killed_worker_cleared_s if result.killed_worker_cleared_s is not None else '-'} s | "
                  f"left after 15 s: {len(result.left_processes)} processes, {len(result.left_entries)} entries "
                  f"(clean after {result.clean_after_s if result.clean_after_s is not None else 'never'} s)",
                  flush=True)
    if args.json:
        print(json.dumps({"env": args.env, "cases": [r.as_dict() for r in results]}))
    return 0 if all(r.clean for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
