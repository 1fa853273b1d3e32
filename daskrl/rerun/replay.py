"""Re-executing a recorded schedule (see :mod:`daskrl.rerun`): checks first, then the steps in order, then a
checkpoint and the verdict.

The replay runs as one task in one Dask worker (a rollout worker's code is a component's, which lives in one): a
worker process of its own, or with ``serial`` a worker thread of this process, as ``--serial`` runs a training run.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from daskrl.config import Config, ConfigError
from daskrl.driver.fleet.role_setups import role_setups
from daskrl.envs import probe_env
from daskrl.envs.packages import import_env_packages
from daskrl.learning.checkpoints import CheckpointStore, checkpoint_dirs, training_digest
from daskrl.monitor.outputs.machine_manifest import machine_manifest, manifest_differences
from daskrl.monitor.outputs.schedule_file import Schedule, read_schedule
from daskrl.rerun.schedule_index import Fill, ScheduleIndex
from daskrl.rerun.scheduled_learner import ScheduledLearner
from daskrl.rerun.scheduled_sampler import ScheduledSampler
from daskrl.runtime.access.cluster import connect_cluster

#: where a replay writes its checkpoints, in the experiment
REPLAY_DIR = "replay"


@dataclass
class Verdict:
    """What a replay found: the steps it replayed, the first step whose metrics differ from the run's (None: none
    did), and its weights against the run's checkpoint at the same step (None: the run kept none there)."""

    steps: int
    recorded_steps: int
    checkpoint: str
    digest: str
    metrics_differ_at: int | None = None
    metrics_differ: list[str] = field(default_factory=list)
    same_as_run: bool | None = None
    run_checkpoint: str | None = None


def replay_experiment(experiment_dir: str, until_step: int | None = None, serial: bool = False,
                      say: Callable[[str], None] = print) -> Verdict:
    """Replay ``experiment_dir``'s schedule up to training step ``until_step`` (None: the run's latest checkpoint).
    What a replay cannot repeat is refused first, in one line naming it (:func:`_refusals`)."""
    schedule = read_schedule(experiment_dir)
    if problems := _refusals(experiment_dir, schedule, until_step):
        raise ConfigError(problems)
    config = Config.from_json(json.dumps(schedule.config))
    try:
        index = ScheduleIndex(schedule, config.sampler.rollout)
    except ValueError as exc:
        raise ConfigError([f"{experiment_dir!r}: {exc}"]) from exc
    kept = _run_checkpoints(experiment_dir, config)
    # by default up to the run's latest checkpoint (its learner may train a step or two after it, as the run stops)
    last = until_step or max((step for step in kept if step <= len(index.steps)), default=len(index.steps))
    if last > len(index.steps):
        raise ConfigError([f"--until-step {until_step}: the schedule of {experiment_dir!r} holds "
                           f"{len(index.steps)} replayable training steps"])
    say(f"daskrl: replaying {last} of the {len(schedule.steps)} recorded training steps of {experiment_dir!r} "
        f"({'in this process' if serial else 'in one worker process'})")
    with connect_cluster(None, n_workers=1, processes=not serial, dashboard_address=None) as session:
        future = session.client.submit(_replay_here, experiment_dir, config, schedule, index, last, pure=False)
        verdict = future.result()
    if last in kept:
        verdict.run_checkpoint, run_digest = kept[last]
        verdict.same_as_run = run_digest == verdict.digest
    return verdict


def _refusals(experiment_dir: str, schedule: Schedule, until_step: int | None) -> list[str]:
    """What makes this schedule one a replay cannot repeat here, a line each."""
    out = []
    if differences := manifest_differences(schedule.machine, machine_manifest()):
        out.append(f"the schedule of {experiment_dir!r} was recorded elsewhere: {'; '.join(differences)} (a replay "
                   "repeats the bytes only with the same packages and instruction sets)")
    if until_step is not None and until_step < 1:
        out.append(f"--until-step {until_step}: give a training step, 1 or more")
    if not schedule.learner_device.startswith("cpu"):
        out.append(f"the run of {experiment_dir!r} trained on {schedule.learner_device}, and a replay computes on "
                   "the CPU, which rounds differently: record the run with --learner-device cpu")
    if not schedule.steps:
        out.append(f"the schedule of {experiment_dir!r} holds no training step (the run stopped before its first): "
                   "nothing to replay")
    if adopted := _adopted_states(experiment_dir):
        out.append(f"the recorded run took another run's training state during training ({adopted}, in "
                   "events.csv), which a replay cannot re-create")
    return out


def _replay_here(experiment_dir: str, config: Config, schedule: Schedule, index: ScheduleIndex, last: int
                 ) -> Verdict:
    """The replay itself, in the worker (see the module docstring): steps 1..``last``, then its checkpoint."""
    import_env_packages(config.env.env_packages)
    spaces = probe_env(config.env.env, config.env.env_kwargs, config.env.obs_keys, config.env.action_mask_key)
    setups = role_setups(config, spaces)
    first = schedule.steps[0]
    learner = ScheduledLearner(setups.learners[0], int(first["version"]) - int(first["step"]))
    samplers: dict[int, ScheduledSampler] = {}
    try:
        differ_at, differ = _run_steps(index, schedule, last, learner, samplers, setups.rollout)
    finally:
        for sampler in samplers.values():
            sampler.on_stop()
            sampler.close_now()
    state = learner.state()
    state["replayed_steps"] = last
    path = CheckpointStore(os.path.join(experiment_dir, REPLAY_DIR)).save(state, state["env_steps"])
    return Verdict(last, len(schedule.steps), str(path), training_digest(state), differ_at, differ)


def _run_steps(index: ScheduleIndex, schedule: Schedule, last: int, learner: ScheduledLearner,
               samplers: dict[int, ScheduledSampler], rollout_setups: tuple) -> tuple[int | None, list[str]]:
    """Training steps 1..``last``, each on its recorded fills (made on demand, each split's in order); the first
    step whose metrics differ from the recorded ones, and which metrics."""
    parts: dict[tuple[int, int], dict] = {}  # (worker, fill position) -> the slot as read, until its step takes it
    differ_at, differ = None, []
    for n, taken in enumerate(index.steps[:last]):
        for fill in taken:
            _make_up_to(fill, index, learner, samplers, rollout_setups, parts)
        step = schedule.steps[n]
        metrics = learner.train([parts.pop((fill.worker, fill.position)) for fill in taken], step.get("hyperparams"))
        recorded = step["metrics"]
        wrong = sorted(k for k, v in recorded.items() if k in metrics and not _same(float(metrics[k]), v))
        if wrong and differ_at is None:
            differ_at, differ = n + 1, wrong
        learner.forget_before(_oldest_needed(index, samplers, learner.version))
    return differ_at, differ


def _make_up_to(fill: Fill, index: ScheduleIndex, learner: ScheduledLearner,
                samplers: dict[int, ScheduledSampler], rollout_setups: tuple, parts: dict) -> None:
    """Make ``fill`` and every fill its split made before it, reading each into ``parts``."""
    sampler = samplers.get(fill.worker)
    if sampler is None:
        sampler = samplers[fill.worker] = ScheduledSampler(f"replay-rollout-{fill.worker}", "replay")
        sampler.on_configure(rollout_setups[fill.worker])
        sampler.on_start()
    fills = index.fills_of(fill.worker, fill.split)
    while (done := sampler.fills_done.get(fill.split, 0)) <= fill.nth:
        made = fills[done]
        parts[made.worker, made.position] = sampler.fill(made.split, made.versions, learner.weights_of,
                                                         learner.reader)


def _same(value: float, recorded: float) -> bool:
    """Equal, or both NaN (a step whose every update was skipped)."""
    return value == recorded or (math.isnan(value) and math.isnan(recorded))


def _oldest_needed(index: ScheduleIndex, samplers: dict[int, ScheduledSampler], newest: int) -> int:
    """The oldest version a fill still to make acts with (the newest, where none is left)."""
    oldest = newest
    for (worker, split), fills in index.by_split.items():
        sampler = samplers.get(worker)
        done = sampler.fills_done.get(split, 0) if sampler is not None else 0
        if done < len(fills):
            oldest = min(oldest, int(fills[done].versions.min()))
    return oldest


def _adopted_states(experiment_dir: str) -> str:
    """The first 'exploit' event of the run (PBT across a sweep's trials loaded another run's state), or ''."""
    path = os.path.join(experiment_dir, "events.csv")
    if not os.path.exists(path):
        return ""
    with open(path, newline="") as f:
        return next((f"at {row.get('env_steps')} env steps" for row in csv.DictReader(f)
                     if row.get("event") == "exploit"), "")


def _run_checkpoints(experiment_dir: str, config: Config) -> dict[int, tuple[str, str]]:
    """The run's checkpoints by training step, the pruned ones' copies (best.pt, milestones) too: (path,
    :func:`training_digest`)."""
    store = CheckpointStore(checkpoint_dirs(experiment_dir, config.policies.num_policies)[0])
    paths = [store.path_of(env_steps) for env_steps in store.steps()] + store.milestones() + [store.best()]
    out = {}
    for path in reversed([p for p in paths if p is not None]):  # a checkpoint file wins over its best.pt copy
        state = store.load(path)
        out[int(state["train_steps"])] = (str(path), training_digest(state))
    return out
