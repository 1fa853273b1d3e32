"""The GPU check: what a session lent a CUDA machine runs first, one script and one table (issue 62, item 4).

Run:  python benchmarks/gpu_check.py [--json]              # on the lent machine: the CPU and CUDA halves
      python benchmarks/gpu_check.py --dry-run [--json]    # the CPU half, short: what a test runs on any machine

Each row is measured alone, one after the other:
1. the learner alone (bench_learner.py's steps: the CartPole MLP, the Nature CNN and the IMPALA ResNet on Atari
   frames, each on its own device's batch sizes), samples/s on the CPU (every core) and on CUDA;
2. sampling-only atari/Breakout with remote inference: one inference worker serving 8 rollout workers (the dry run: 2),
   the policy on CUDA (``--inference-device cuda``) and on the CPU;
3. atari/Breakout trained for 90 s (``--training-seconds``; the dry run: seconds) with the inference worker and the
   learner on CUDA, and the same on the CPU (90 s, not the 3 minutes issue 62 named: two of those, the start-ups and
   the other rows pass a lent machine's 10 minutes a command);
4. the tests that need CUDA (``pytest -k "cuda or gpu"`` over the files that hold them), which skip everywhere else.

A row that cannot run says why (no CUDA device, the atari extra missing) and the others go on. Nothing reaches the
network: what it needs is the working tree and the packages already on the machine. The whole run is sized to take
under 8 minutes on the lent machine; the dry run, with small batches and seconds-long rows, about half a minute here
(tests/drills/test_gpu_check.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(__file__))
from bench_learner import Step, measure  # noqa: E402
from bench_sampling import daskrl_fps  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: the tests that need CUDA: they skip without it, and run here on a lent machine
CUDA_TESTS = ("tests/drills/test_learner_group.py", "tests/unit/test_learner_kernels.py",
              "tests/cluster/test_gpu_paths.py")


@dataclass(frozen=True)
class Plan:
    """How long and how large each row runs: the lent machine's full check, or the dry run's short one."""

    learner_steps: int
    learner_samples: int  # samples a learner step trains on (0: bench_learner's size for the model and device)
    rollout_workers: int
    envs_per_worker: int
    sampling_s: float
    training_s: float
    startup_s: float
    warmup_s: float  # after the start-up, before a run's rate counts

    @classmethod
    def of(cls, dry_run: bool, training_s: float) -> Plan:
        if dry_run:  # with a 4-s start-up a Breakout row once measured 0 beside the suite: no progress before its end
            return cls(learner_steps=1, learner_samples=256, rollout_workers=2, envs_per_worker=2, sampling_s=2.0,
                       training_s=3.0, startup_s=10.0, warmup_s=1.0)
        return cls(learner_steps=8, learner_samples=0, rollout_workers=8, envs_per_worker=16, sampling_s=15.0,
                   training_s=training_s, startup_s=25.0, warmup_s=4.0)


def devices(dry_run: bool) -> tuple[list[str], str]:
    """The devices to measure on, and why CUDA is left out (empty where it is not)."""
    if dry_run:
        return ["cpu"], "the dry run measures the CPU half"
    import torch

    if not torch.cuda.is_available():
        return ["cpu"], "torch sees no CUDA device"
    return ["cpu", "cuda"], ""


def learner_rows(plan: Plan, on: list[str]) -> list[dict]:
    """The learner alone per model and device (every core of the CPU; one CUDA device)."""
    rows = []
    for model in ("mlp", "cnn", "impala"):
        for device in on:
            step = Step.of(model, gpu=device == "cuda", samples=plan.learner_samples,
                           minibatch=min(plan.learner_samples, 128) if plan.learner_samples else 0)
            rate = measure(step, device, 1, os.cpu_count() or 1, plan.learner_steps)
            rows.append({"row": f"learner {model}", "device": device, "value": round(rate), "unit": "samples/s",
                         "detail": f"{step.samples} samples a step, minibatches of {step.minibatch}"})
    return rows


def atari_missing() -> str:
    """Why Breakout cannot run here ("" where it can)."""
    try:
        import ale_py  # noqa: F401
    except ImportError as exc:
        return f"the atari extra is missing ({exc}): pip install 'daskrl[atari]'"
    return ""


def breakout_rows(plan: Plan, on: list[str]) -> list[dict]:
    """Remote inference serving the rollout workers, then training, per device of the inference worker and
    learner."""
    base = {"num_workers": plan.rollout_workers, "num_envs_per_worker": plan.envs_per_worker, "worker_num_splits": 2,
            "num_inference_workers": 1}
    rows = []
    for device in on:
        sampled, run = daskrl_fps("atari/Breakout", "remote", plan.sampling_s, {**base, "inference_device": device},
                                  plan.startup_s, warmup=plan.warmup_s)
        rows.append({"row": f"Breakout sampling, 1 inference worker for {plan.rollout_workers} rollout workers",
                     "device": device, "value": round(sampled), "unit": "frames/s",
                     "detail": f"inference precision {_precision(run)}"})
    for device in on:
        trained, run = daskrl_fps("atari/Breakout", "remote", plan.training_s,
                                  {**base, "inference_device": device, "learner_device": device}, plan.startup_s,
                                  sampling_only=False, warmup=plan.warmup_s)
        rows.append({"row": f"Breakout training for {plan.training_s:g} s", "device": device,
                     "value": round(trained), "unit": "frames/s",
                     "detail": f"{run['env_steps']:,} env steps, return {_number(run.get('episode_return_mean'))}"})
    return rows


def _number(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:.1f}"


def _precision(run: dict) -> str:
    chosen = sorted({str(p) for p in (run.get("inference_precision") or {}).values()})
    return ", ".join(chosen) or "not reported"


def cuda_tests() -> dict:
    """pytest -k "cuda or gpu" over :data:`CUDA_TESTS`: how many passed, failed and skipped (and the tail where one
    failed)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-k", "cuda or gpu", "-p", "no:cacheprovider",
                           *CUDA_TESTS], cwd=os.path.dirname(HERE), capture_output=True, text=True, timeout=300)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    counts = {word: 0 for word in ("passed", "failed", "skipped", "error")}
    for part in last.strip("= ").split(","):
        number, _, word = part.strip().partition(" ")
        if number.isdigit() and word.split()[0] in counts:
            counts[word.split()[0]] = int(number)
    return {**counts, "line": last, "tail": done.stdout[-2000:] if done.returncode not in (0, 5) else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the CPU half, short (any machine)")
    parser.add_argument("--training-seconds", type=float, default=90.0, help="each Breakout training row's length")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    t0 = time.monotonic()
    plan = Plan.of(args.dry_run, args.training_seconds)
    on, without_cuda = devices(args.dry_run)
    rows = learner_rows(plan, on)
    skipped = []
    missing = atari_missing()
    if missing:
        skipped.append(f"Breakout rows: {missing}")
    else:
        rows += breakout_rows(plan, on)
    tests = None if args.dry_run else cuda_tests()
    import torch

    name = torch.cuda.get_device_name(0) if "cuda" in on else "none"
    print(f"{os.cpu_count()} cores; CUDA device: {name}{f' ({without_cuda})' if without_cuda else ''}; torch "
          f"{torch.__version__}\n")
    print("| row | device | value | unit | detail |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['device']} | {r['value']:,} | {r['unit']} | {r['detail']} |")
    for line in skipped:
        print(f"\nskipped: {line}")
    if tests is not None:
        print(f"\nCUDA tests ({', '.join(CUDA_TESTS)}, -k 'cuda or gpu'): {tests['line']}")
        if tests["tail"]:
            print(tests["tail"])
    elapsed = time.monotonic() - t0
    print(f"\nthe check took {elapsed:.0f} s")
    if args.json:
        print(json.dumps({"rows": rows, "skipped": skipped, "cuda_device": name, "cuda_tests": tests,
                          "dry_run": args.dry_run, "elapsed_s": round(elapsed, 1)}))


if __name__ == "__main__":
    main()
