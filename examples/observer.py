"""An observer of your own: stop training CartPole-v1 once the mean return has stopped improving.

    python examples/observer.py [--patience 5] [--seconds 50]

`daskrl.train(config, observers=[...])` hands the run's loop to each observer: `on_start`, `on_poll` (four times a
second), `on_report` (with every row of `metrics.csv`), `on_checkpoint`, `on_stop`, and `summary()` for what
`train()` returns (docs/training.md, "Observers"). This one watches the rows: when `--patience` reports in a row
bring no better mean return, it asks the run to stop with `run.request_stop(reason)`, which stops it as Ctrl-C
does (a last row, a final checkpoint, then the summary).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import daskrl
from daskrl.driver.loop.observers import Run


class StopOnPlateau(daskrl.Observer):
    """Asks the run to stop when ``patience`` reports in a row did not beat the best mean return by ``min_delta``."""

    def __init__(self, patience: int, min_delta: float = 0.0) -> None:
        self.patience = patience
        self.min_delta = min_delta
        self.best = -math.inf
        self.best_at_env_steps = 0
        self.reports_without_gain = 0
        self.checkpoints = 0

    def on_start(self, run: Run) -> None:
        run.say(f"StopOnPlateau: stops {self.patience} reports after the mean return last improved")

    def on_report(self, run: Run, row: dict[str, Any]) -> None:
        mean_return = row["episode_return_mean"]
        if math.isnan(mean_return):  # no episode has ended yet
            return
        if mean_return > self.best + self.min_delta:
            self.best = mean_return
            self.best_at_env_steps = row["env_steps"]
            self.reports_without_gain = 0
            return
        self.reports_without_gain += 1
        if self.reports_without_gain >= self.patience:
            run.request_stop(f"StopOnPlateau: no better mean return than {self.best:.1f} in {self.patience} reports")

    def on_checkpoint(self, run: Run, env_steps: int) -> None:
        self.checkpoints += 1

    def summary(self) -> dict[str, Any]:
        return {"plateau": {"best_return": self.best, "best_at_env_steps": self.best_at_env_steps,
                            "checkpoints_seen": self.checkpoints}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patience", type=int, default=5, help="reports without a better mean return")
    parser.add_argument("--seconds", type=float, default=50.0, help="stop after this many seconds anyway")
    parser.add_argument("--train-dir", default="train_dir")
    args = parser.parse_args()

    config = daskrl.Config()
    config.env.env = "CartPole-v1"
    config.run.experiment = "observer_example"
    config.run.train_dir = args.train_dir
    config.run.overwrite = True  # the example starts afresh each time it runs
    config.run.train_for_seconds = args.seconds
    config.run.train_for_env_steps = 0
    summary = daskrl.train(config, observers=[StopOnPlateau(args.patience)])
    plateau = summary["plateau"]
    print(f"stopped: {summary['stop_reason']}")
    print(f"best mean return {plateau['best_return']:.1f} at {plateau['best_at_env_steps']:,} env steps; "
          f"{summary['env_steps']:,} env steps in {summary['elapsed_s']:.1f} s, {plateau['checkpoints_seen']} "
          "checkpoint(s) seen")


if __name__ == "__main__":  # worker processes are started fresh: keep the guard
    main()
