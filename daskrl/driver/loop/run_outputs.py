"""Where a run's numbers go: every report's row (``metrics.csv``, TensorBoard mirrored to W&B,
``time_breakdown.jsonl``, the console, the rows a run handle shows) and the changes made from outside the loop
(``events.csv``, TensorBoard's text and ``event/`` scalars), the dashboard's events, through the scheduler's
event log, with --record-schedule the run's schedule (``schedule/``) and with --record-dataset the episodes its
rollout workers recorded (a Minari dataset)."""

from __future__ import annotations

import io
import json
import logging
import math
import os
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.driver.loop.policy_book import PolicyBook
from daskrl.monitor.console import ENV_STEPS, UPDATES, ConsoleView, shows
from daskrl.monitor.outputs.csv_log import CsvLog
from daskrl.monitor.outputs.dataset_file import DatasetWriter, NoDataset
from daskrl.monitor.outputs.machine_manifest import machine_manifest
from daskrl.monitor.outputs.schedule_file import NoSchedule, ScheduleWriter
from daskrl.monitor.outputs.tensorboard_log import TensorBoardLog
from daskrl.monitor.run_state import RunState
from daskrl.protocol import METRICS_TOPIC
from daskrl.runtime.actors.incidents import Incidents

if TYPE_CHECKING:  # W&B is imported only by the runs that log to it
    from daskrl.monitor.outputs.wandb_log import WandbLog


class RunOutputs:
    """See the module docstring. ``close`` once the run stopped."""

    def __init__(self, config: Config, state: RunState, progress: bool, wandb_log: WandbLog | None, client: Any,
                 incidents: Incidents) -> None:
        """``progress``: show each report on the console (a run started from Python, whose handle shows its state,
        keeps them out of a notebook's cells); ``wandb_log``: the run's W&B run (--wandb-project), which gets what
        TensorBoard gets and is ended with the run; ``client``: the scheduler's, for the dashboard's events (a
        hiccup there is counted in ``incidents``)."""
        self.config, self.client, self.incidents = config, client, incidents
        self.rows: list[dict[str, Any]] = []  # every report's row, for the run's handle
        self.events_csv: CsvLog | None = None  # events.csv, from the first change made from outside
        self.csv_log = CsvLog(os.path.join(self.config.experiment_dir, "metrics.csv"), append=config.run.resume)
        self.wandb_log = wandb_log
        self.tb_log = TensorBoardLog(os.path.join(self.config.experiment_dir, "tensorboard"), mirror=wandb_log,
                                     config=config, by_updates=state.counts_updates)
        #: --record-schedule: the components' fills and training steps, for `daskrl replay`
        self.schedule = ScheduleWriter(config.experiment_dir, config, machine_manifest()) \
            if config.run.record_schedule else NoSchedule()
        #: --record-dataset: the episodes the rollout workers recorded, into a Minari dataset
        self.dataset = DatasetWriter(config.run.record_dataset, config.env,
                                     f"daskrl experiment {config.run.experiment}: {config.algo.algo} on "
                                     f"{config.env.env}", config.run.record_episodes) \
            if config.run.record_dataset else NoDataset()
        seconds = config.run.train_for_seconds  # counted from this run's start; rows' time_s includes resumed time
        shown = progress and shows(logging.INFO)  # --log-level warning keeps the progress lines off the console too
        budget, counted = (config.run.train_for_updates, UPDATES) if state.counts_updates else \
            (config.run.train_for_env_steps, ENV_STEPS)
        self.console = ConsoleView(budget, seconds + state.elapsed_offset if seconds else 0.0,
                                   None if shown else io.StringIO(), window=config.run.stop_window, counted=counted)

    def take_news(self, stats: dict[str, Any]) -> None:
        """What one component's collected statistics bring for the run's recordings: its filled slots and training
        steps (--record-schedule), its recorded episodes (--record-dataset)."""
        self.schedule.take(stats)
        self.dataset.take(stats)

    def write(self, row: dict[str, Any], state: RunState, book: PolicyBook) -> None:
        """A report's row everywhere it goes, with each policy's rows."""
        shares = state.shares
        self.rows.append(row)
        self.csv_log.write(row)
        self.tb_log.write(row, shares)
        policy_rows = book.rows(row["time_s"], row["env_steps"])
        book.write(policy_rows, self.tb_log)
        book.self_play_report(row["time_s"], row["env_steps"], self.tb_log)
        self.tb_log.flush()
        with open(os.path.join(self.config.experiment_dir, "time_breakdown.jsonl"), "a") as f:
            f.write(json.dumps({"time_s": row["time_s"], "env_steps": row["env_steps"], "shares": shares}) + "\n")
        run = self.config.run
        self.log_event(METRICS_TOPIC, {
            "run": run.experiment, "env": self.config.env.env, "row": finite(row),
            "policies": [finite(r) for r in policy_rows], "shares": shares, "incidents": state.incidents,
            "replay": state.replay, "stop_at": {"env_steps": run.train_for_env_steps, "seconds": run.train_for_seconds}})
        self.console.update(row)

    def log_event(self, topic: str, msg: dict) -> None:
        """A low-rate event for the dashboard (through the scheduler's event log): a view, so a hiccup there is
        counted and logged, and training goes on."""
        try:
            self.client.log_event(topic, msg)
        except Exception as exc:
            self.incidents.note(f"event-not-sent:{topic}", exc)

    def event(self, time_s: float, env_steps: int, event: str, detail: dict[str, Any]) -> None:
        """A change made from outside the loop, in ``events.csv`` and in TensorBoard (text, and each number under
        ``event/``)."""
        if self.events_csv is None:
            self.events_csv = CsvLog(os.path.join(self.config.experiment_dir, "events.csv"), append=True)
        self.events_csv.write({"time_s": time_s, "env_steps": env_steps, "event": event,
                               "detail": " ".join(f"{k}={v}" for k, v in sorted(detail.items()))})
        self.tb_log.writer.add_text(f"events/{event}", repr(detail), env_steps)
        for key, value in detail.items():
            if isinstance(value, (int, float)):
                self.tb_log.writer.add_scalar(f"event/{event}/{key}", value, env_steps)

    def close(self, failed: bool) -> None:
        """Close every log; the W&B run ends as failed or not (after the observers stopped: a video recorded at the
        stop is in it)."""
        self.console.close()
        self.dataset.close()  # every recorded episode written before the run returns
        if self.events_csv is not None:
            self.events_csv.close()
        self.csv_log.close()
        self.tb_log.close()
        if self.wandb_log is not None:
            self.wandb_log.close(failed=failed)


def finite(row: dict) -> dict:
    """NaN is not JSON: metrics not measured yet travel as None."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
