"""Running a sweep on one Dask cluster: its trials as daskrl runs, as many at once as the free workers hold.

One loop, on the calling thread, twice a second: trials whose runs have started are watched through their handles
(:func:`daskrl.start`), each configuration is judged at its rungs (ASHA, or Optuna's pruner) once every seed (of
every task) has reached the rung, PBT across trials exploits at its periods, ended runs are recorded, and the next
trials start (each start on a thread of its own, so a start-up of a few seconds holds up nothing) while the cluster
has free workers for them. A finished or stopped trial's workers are free for the next one at once (its run's claim ends
with it). A trial whose run fails (a worker lost beyond what the run recovers) starts again from its checkpoint,
at most :data:`MAX_RESTARTS` times. Ctrl-C or SIGTERM stop every running trial in order (a final checkpoint
each) and leave a table that ``--resume`` continues from.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from daskrl.config import Config
from daskrl.driver.launch.experiment import has_checkpoint
from daskrl.driver.launch.stop_signals import StopOnSignals
from daskrl.sweep.asha import ASHA
from daskrl.sweep.cluster import SweepCluster
from daskrl.sweep.exploit import TrialPBT
from daskrl.sweep.search import make_searcher
from daskrl.sweep.spec import SweepSpec
from daskrl.sweep.trials import ENDED, FAILED, FINISHED, INTERRUPTED, QUEUED, RUNNING, STOPPED, Trial, write_table

#: times a trial whose run failed starts again from its checkpoint before it counts as failed
MAX_RESTARTS = 2
POLL_S = 0.5


class SweepDriver:
    """See the module docstring."""

    def __init__(self, spec: SweepSpec, sweep_dir: str, trials: list[Trial], cluster: SweepCluster, need: int,
                 say: Any = print) -> None:
        """``need``: the worker processes one trial's run takes (:func:`daskrl.driver.fleet.placement.workers_needed`)."""
        self.spec, self.sweep_dir, self.trials, self.cluster, self.say = spec, sweep_dir, trials, cluster, say
        self.searcher = make_searcher(spec, sweep_dir)
        self.asha = ASHA(spec.rung_steps(), spec.reduction)
        self.pbt = TrialPBT(spec.pbt, sweep_dir, spec.search_seed) if spec.pbt else None
        self.handles: dict[str, Any] = {}
        self.starting: dict[str, Future] = {}
        self.stopping: dict[str, Future] = {}
        self.started_at: dict[str, float] = {}
        self.wall_before: dict[str, float] = {}
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="daskrl-sweep")
        self.next_config = 1 + max((t.config_index for t in trials), default=-1)
        self.told: set[int] = {t.config_index for t in trials
                               if all(u.status in ENDED for u in trials if u.config_index == t.config_index)}
        self.judged: set[tuple[int, int]] = set()  # (configuration, rung) decided: each once
        self._restore_rungs()
        self.need = need
        self.concurrent = spec.concurrent or max(1, cluster.total_workers() // self.need)

    # ---- the loop ----

    def run(self) -> str:
        """Run every trial still to run; returns why the loop ended ("done" or the signal that stopped it)."""
        signals = StopOnSignals()
        try:
            while not signals.requested:
                changed = self._collect_starts() | self._watch() | self._fill()
                if changed:
                    self._write()
                if not self._busy() and not self._queued() and self._exhausted():
                    return "done"
                time.sleep(POLL_S)
            self._interrupt(signals.requested)
            return signals.requested
        except KeyboardInterrupt:
            self._interrupt("SIGINT")
            return "SIGINT"
        finally:
            signals.restore()
            self._write()
            self.pool.shutdown(wait=True)

    def _busy(self) -> bool:
        return bool(self.starting or self.handles or self.stopping)

    def _queued(self) -> list[Trial]:
        return [t for t in self.trials if t.status in (QUEUED, INTERRUPTED)]

    def _exhausted(self) -> bool:
        """No configuration is left to ask for."""
        params = self.searcher.ask(self.next_config)
        if params is None:
            return True
        self._add_configuration(params)
        return False

    # ---- starting trials ----

    def _fill(self) -> bool:
        """Start queued trials (asking the searcher for more configurations) while workers are free."""
        changed = False
        while len(self.starting) + len(self.handles) < self.concurrent:
            queued = self._queued()
            if not queued:
                if self._exhausted():
                    return changed
                continue
            if self.cluster.free_workers() - self._claims_in_flight() < self.need:
                return changed
            trial = queued[0]
            trial.status, trial.note = RUNNING, ""
            self.started_at[trial.trial_id] = time.monotonic()
            self.wall_before[trial.trial_id] = trial.wall_time_s  # an earlier life's, on a resume or a restart
            self.starting[trial.trial_id] = self.pool.submit(self.cluster.start, self._config_of(trial))
            changed = True
        return changed

    def _claims_in_flight(self) -> int:
        return self.need * len(self.starting)

    def _add_configuration(self, params: dict[str, Any]) -> None:
        index = self.next_config
        self.next_config += 1
        for task in self.spec.task_envs():
            for seed in self.spec.seeds:
                self.trials.append(Trial(index, seed, dict(params), task=task))

    def _config_of(self, trial: Trial) -> Config:
        config = self.spec.trial_config(trial.params, trial.seed, os.path.dirname(self.sweep_dir),
                                        f"{os.path.basename(self.sweep_dir)}/{trial.trial_id}", trial.task)
        resume = has_checkpoint(config.experiment_dir)
        return config.replace(resume=resume, overwrite=not resume)

    def _collect_starts(self) -> bool:
        changed = False
        for trial_id, future in list(self.starting.items()):
            if not future.done():
                continue
            del self.starting[trial_id]
            trial = self._trial(trial_id)
            try:
                self.handles[trial_id] = future.result()
            except Exception as exc:  # refused (a value the run refuses at start, an env that raises): one line
                self._ended(trial, FAILED, _one_line(exc))
            changed = True
        return changed

    # ---- watching running trials ----

    def _watch(self) -> bool:
        changed = False
        for trial_id, handle in list(self.handles.items()):
            trial = self._trial(trial_id)
            status = handle.status()
            before = (trial.env_steps, trial.final_return)
            self._observe(trial, status)
            trial.wall_time_s = self.wall_before[trial_id] + time.monotonic() - self.started_at[trial_id]
            changed |= before != (trial.env_steps, trial.final_return)
            if handle.done:
                self._run_ended(trial, handle)
                changed = True
                continue
            changed |= self._rungs(trial)
            if self.pbt is not None and trial_id not in self.stopping and self.pbt.due(trial):
                changed |= self._exploit(trial)
        for trial_id in [t for t, f in self.stopping.items() if f.done()]:
            del self.stopping[trial_id]
        return changed

    def _exploit(self, trial: Trial) -> bool:
        """PBT's step for a trial that passed a period; a source that ended meanwhile skips it (a view of the
        sweep's, never a reason to stop it)."""
        live = [self._trial(t) for t, h in self.handles.items() if t not in self.stopping and not h.done]
        try:
            done = self.pbt.exploit(trial, live, self.handles)
        except Exception as exc:
            self.say(f"daskrl sweep: {trial.trial_id}: PBT step skipped: {_one_line(exc)}")
            return False
        if done:
            self.say(f"daskrl sweep: {trial.trial_id} {trial.note} "
                     f"({', '.join(f'{k}={v:.3g}' for k, v in done.hyperparams.items())})")
        return done is not None

    def _observe(self, trial: Trial, status: dict[str, Any]) -> None:
        trial.observe(status["env_steps"], status["episode_return_mean"])
        trial.final_score = self.spec.score(trial.task, trial.final_return)

    def _run_ended(self, trial: Trial, handle: Any) -> None:
        del self.handles[trial.trial_id]
        try:
            handle.wait(0)
        except Exception as exc:
            if trial.status == STOPPED:  # it failed while early stopping stopped it: stopped all the same
                self._tell_if_done(trial.config_index)
                return
            if trial.restarts < MAX_RESTARTS and has_checkpoint(self._config_of(trial).experiment_dir):
                trial.restarts += 1
                trial.status, trial.note = QUEUED, f"restarted from its checkpoint after: {_one_line(exc)}"
                self.say(f"daskrl sweep: {trial.trial_id} failed ({_one_line(exc)}); it starts again from its "
                         "checkpoint")
                return
            self._ended(trial, FAILED, _one_line(exc))
            return
        if trial.status == RUNNING:
            self._ended(trial, FINISHED, trial.note)
        else:  # stopped early: its configuration may be done now
            self._tell_if_done(trial.config_index)

    def _ended(self, trial: Trial, status: str, note: str) -> None:
        trial.status, trial.note = status, note
        if status == FAILED:
            self.say(f"daskrl sweep: {trial.trial_id} failed: {note}")
        self._tell_if_done(trial.config_index)

    def _tell_if_done(self, index: int) -> None:
        mine = [t for t in self.trials if t.config_index == index]
        if index in self.told or any(t.status not in ENDED for t in mine):
            return
        self.told.add(index)
        value = finite_mean([t.final_score for t in mine if t.status != FAILED])
        self.searcher.tell(index, None if math.isnan(value) else value, pruned=any(t.status == STOPPED for t in mine))

    # ---- early stopping ----

    def _rungs(self, trial: Trial) -> bool:
        changed = False
        for step in self.asha.rungs:
            if step not in trial.rung_values and trial.env_steps >= step:
                trial.rung_values[step] = trial.final_score
                changed = True
                self._judge(trial.config_index, step)
        return changed

    def _judge(self, index: int, step: int) -> None:
        """Once every trial of configuration ``index`` has reached rung ``step`` (or ended): go on, or stop them
        all (judged by the mean score: the mean return without tasks)."""
        mine = [t for t in self.trials if t.config_index == index and t.status != FAILED]
        if (index, step) in self.judged or not mine or any(step not in t.rung_values for t in mine
                                                           if t.status not in ENDED):
            return
        self.judged.add((index, step))
        value = finite_mean([t.rung_values[step] for t in mine if step in t.rung_values])
        if self.spec.early_stopping == "median":
            go_on = not self.searcher.report(index, step, value)
        else:
            go_on = self.asha.decide(index, step, value)
        if go_on:
            return
        what = f"mean score {value:.3f}" if self.spec.tasks else f"return {value:.1f}"
        self.say(f"daskrl sweep: configuration {index} stopped at {step:,} env steps ({what})")
        for t in mine:
            if t.trial_id in self.handles and t.trial_id not in self.stopping:
                t.status, t.note = STOPPED, f"stopped early at the {step:,}-step rung"
                self.stopping[t.trial_id] = self.pool.submit(self.handles[t.trial_id].stop)

    def _restore_rungs(self) -> None:
        """A resumed sweep's decisions: every rung all of a configuration's seeds had reached."""
        for index in {t.config_index for t in self.trials}:
            mine = [t for t in self.trials if t.config_index == index and t.status != FAILED]
            for step in self.asha.rungs:
                values = [t.rung_values[step] for t in mine if step in t.rung_values]
                if mine and len(values) == len(mine):
                    self.asha.restore(index, step, finite_mean(values))
                    self.judged.add((index, step))

    # ---- a stop, and the table ----

    def _interrupt(self, why: str) -> None:
        """Stop every trial in order (a final checkpoint each), starts still under way included."""
        self.say(f"daskrl sweep: {why}: stopping {len(self.handles) + len(self.starting)} running trial(s) "
                 "with a checkpoint each")
        for trial_id, future in self.starting.items():
            try:
                self.handles[trial_id] = future.result()
            except Exception as exc:
                self._trial(trial_id).status, self._trial(trial_id).note = INTERRUPTED, _one_line(exc)
        self.starting.clear()
        stops = {trial_id: self.pool.submit(h.stop) for trial_id, h in self.handles.items() if not h.done}
        for trial_id, future in stops.items():
            try:
                future.result()
            except Exception as exc:
                self._trial(trial_id).note = _one_line(exc)
        for trial_id, handle in self.handles.items():
            trial = self._trial(trial_id)
            self._observe(trial, handle.status())  # its last numbers, after its final checkpoint
            if trial.status == RUNNING:
                trial.status = INTERRUPTED
        self.handles.clear()

    def _write(self) -> None:
        write_table(self.sweep_dir, self.trials)
        self.cluster.publish(self.spec.name, self.trials)

    def _trial(self, trial_id: str) -> Trial:
        return next(t for t in self.trials if t.trial_id == trial_id)


def finite_mean(values: list[float]) -> float:
    """The mean of the numbers that are not NaN (a seed with no finished episode yet has none), or NaN."""
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


__all__ = ["MAX_RESTARTS", "SweepDriver"]
