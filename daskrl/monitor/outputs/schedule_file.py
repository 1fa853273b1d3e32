"""An asynchronous run's schedule on disk (--record-schedule), as ``daskrl replay`` reads it back.

The experiment's ``schedule/`` folder holds:

- ``manifest.json``: the run's config as it started and the machine it was recorded on
  (:mod:`daskrl.monitor.outputs.machine_manifest`), which a replay checks before anything runs;
- ``fills.jsonl``: each rollout worker's filled slots, in its order, a line per batch the runner collected
  (``{"worker", "inc", "entries": [[split, slot, version runs], ...]}``: :mod:`daskrl.sampling.slots.fill_log`);
- ``steps.jsonl``: each training step, a line each (``{"step", "slots", "version", "metrics"}``:
  :mod:`daskrl.learning.step_log`);
- ``learner.json``: the device the learner trained on (a replay computes on this machine's CPU).

The runner appends what each poll collected, so a run that stops early leaves a schedule that is replayable up to
its last complete step.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from daskrl.config import Config
from daskrl.errors import ConfigError

SCHEDULE_DIR = "schedule"


class ScheduleWriter:
    """Appends the components' schedule news to the experiment's ``schedule/`` (see the module docstring)."""

    def __init__(self, experiment_dir: str, config: Config, machine: dict[str, Any]) -> None:
        self.directory = os.path.join(experiment_dir, SCHEDULE_DIR)
        os.makedirs(self.directory, exist_ok=True)
        for name in ("fills.jsonl", "steps.jsonl"):  # a schedule describes one run from its start
            open(os.path.join(self.directory, name), "w").close()
        with open(os.path.join(self.directory, "manifest.json"), "w") as f:
            json.dump({"config": json.loads(config.to_json()), "machine": machine}, f, indent=1)
        self.fills_written = self.steps_written = 0

    def take(self, stats: dict[str, Any]) -> None:
        """The fills and training steps in one component's collected statistics, if any."""
        if "fills" in stats:
            self._append("fills.jsonl", [stats["fills"]])
            self.fills_written += len(stats["fills"]["entries"])
        if "steps" in stats:
            self._append("steps.jsonl", stats["steps"])
            if not self.steps_written:
                with open(os.path.join(self.directory, "learner.json"), "w") as f:
                    json.dump({"device": stats.get("device", "cpu")}, f)
            self.steps_written += len(stats["steps"])

    def _append(self, name: str, records: list[dict[str, Any]]) -> None:
        with open(os.path.join(self.directory, name), "a") as f:
            f.writelines(json.dumps(record, separators=(",", ":")) + "\n" for record in records)


class NoSchedule:
    """Without --record-schedule: nothing is written."""

    def take(self, stats: dict[str, Any]) -> None:
        pass


@dataclass
class Schedule:
    """A recorded schedule, read back: the config and machine it was recorded with, each rollout worker's fills in
    order (``[split, slot, version runs]``), the incarnations each worker had, and the training steps in order."""

    config: dict[str, Any]
    machine: dict[str, Any]
    fills: dict[int, list[list]] = field(default_factory=dict)
    incarnations: dict[int, set[str]] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    learner_device: str = "cpu"


def read_schedule(experiment_dir: str) -> Schedule:
    """The schedule of an experiment; a ConfigError, naming the fix, where it recorded none."""
    directory = os.path.join(experiment_dir, SCHEDULE_DIR)
    manifest_path = os.path.join(directory, "manifest.json")
    if not os.path.exists(manifest_path):
        raise ConfigError([f"{experiment_dir!r} has no recorded schedule ({SCHEDULE_DIR}/manifest.json): check "
                           "--experiment and --train-dir, or train it with --record-schedule"])
    with open(manifest_path) as f:
        manifest = json.load(f)
    schedule = Schedule(manifest["config"], manifest["machine"])
    for record in _lines(os.path.join(directory, "fills.jsonl")):
        worker = int(record["worker"])
        schedule.fills.setdefault(worker, []).extend(record["entries"])
        schedule.incarnations.setdefault(worker, set()).add(record["inc"])
    schedule.steps = sorted(_lines(os.path.join(directory, "steps.jsonl")), key=lambda step: step["step"])
    learner_path = os.path.join(directory, "learner.json")
    if os.path.exists(learner_path):
        with open(learner_path) as f:
            schedule.learner_device = json.load(f)["device"]
    return schedule


def _lines(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
