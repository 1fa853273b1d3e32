"""``daskrl replay --experiment X [--until-step N] [--serial]``: re-execute a run recorded with --record-schedule and
say whether it came out the same (docs/reproducibility.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_replay_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="re-execute a run recorded with --record-schedule in one process: the same "
                                      "weights and metrics, bit for bit (docs/reproducibility.md)",
                       description=__doc__)
    p.add_argument("--experiment", required=True, help="experiment name (trained with --record-schedule)")
    p.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    p.add_argument("--until-step", type=int, default=None, metavar="N",
                   help="stop after training step N and write a checkpoint there (default: every recorded step)")
    p.add_argument("--serial", action="store_true",
                   help="replay in this process (a debugger can step through it) instead of one worker process")


def run_replay(args: argparse.Namespace) -> int:
    """Replay, then print the verdict; 0 when the replay matched everything it could compare, 1 when it did not."""
    from daskrl.rerun import replay_experiment

    verdict = replay_experiment(os.path.join(args.train_dir, args.experiment), args.until_step, serial=args.serial,
                                say=lambda line: print(line, flush=True))
    print(f"daskrl replay: {verdict.steps} training steps replayed (the schedule holds {verdict.recorded_steps}); "
          f"checkpoint {verdict.checkpoint}, tensors SHA-256 {verdict.digest[:16]}")
    if verdict.metrics_differ_at is None:
        print(f"daskrl replay: every step's metrics equal the recorded run's ({verdict.steps} steps)")
    else:
        print(f"daskrl replay: metrics differ from the recorded run's from step {verdict.metrics_differ_at} on "
              f"({', '.join(verdict.metrics_differ)})")
    if verdict.same_as_run is None:
        print(f"daskrl replay: the run kept no checkpoint at step {verdict.steps} to compare the weights with")
    else:
        print(f"daskrl replay: weights and optimizer {'equal' if verdict.same_as_run else 'DIFFER from'} the run's "
              f"checkpoint at step {verdict.steps} ({verdict.run_checkpoint})")
    return 0 if verdict.metrics_differ_at is None and verdict.same_as_run is not False else 1
